"""Operations on a running deployment (any cluster, not only the local stack): provisioning."""
