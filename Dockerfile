# syntax=docker/dockerfile:1
# The feed service image: `feedctl` for the read server and provisioning (k8s/*.yaml), and the Spark
# driver and executors of the stream (k8s/stream-sparkapplication.yaml). Build from the repository root:
#   docker build -t registry.example.internal/feed-service:0.1.0 .
#
# Base: python:3.11-slim-bookworm + the Eclipse Temurin 17 JRE + the pyspark wheel, which is a
# whole Spark (jars, bin/spark-submit, the Kubernetes scheduler: spark-kubernetes_2.13). Not the official
# apache/spark:<v>-scala2.13-java17-python3-ubuntu: it is built on Ubuntu 22.04, whose python3 is 3.10,
# below this project's requires-python (>=3.11), and installing the project there would put a second
# Spark (the pyspark wheel, a dependency) next to its /opt/spark; besides, no official image of Spark 4.2.0
# was published (https://github.com/apache/spark-docker has 4.1.2 and 4.2.0-preview5). One Spark, the
# wheel's, is what the Kafka connector's jars are matched against (feed_service/stack/spark_connector.py).
# What Spark on Kubernetes needs of an image is taken from the official ones: Spark's entrypoint script
# (k8s/image/entrypoint.sh), tini, libnss-wrapper and the `spark` user, uid 185.
# tests/unit/test_k8s_validation.py checks this file against the pins; scripts/image builds it with podman
# on local stand-ins of the base images and checks the built image (tests/image/, docs/operations.md#the-image).

# The base images, as build arguments whose defaults are the registry's: a real build leaves them as
# they are; scripts/image passes local stand-ins made from Debian packages where no registry is reached
# (docs/operations.md#the-image). PYTHON_IMAGE needs `python` >= 3.11 with venv and apt; JRE_IMAGE a Java
# 17 runtime, self-contained, at /opt/java/openjdk; MAVEN_IMAGE a Maven at /usr/share/maven.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG JRE_IMAGE=eclipse-temurin:17-jre
ARG MAVEN_IMAGE=maven:3.9-eclipse-temurin-17
ARG SPARK_VERSION=4.2.0

# A JRE copied into the Python image, as https://hub.docker.com/_/eclipse-temurin describes.
FROM ${JRE_IMAGE} AS jre
FROM ${MAVEN_IMAGE} AS maven

# ---- build: the project and its dependencies into a virtualenv, the Kafka connector's jars into a cache
FROM ${PYTHON_IMAGE} AS build
ARG SPARK_VERSION
ENV JAVA_HOME=/opt/java/openjdk \
    PATH=/opt/venv/bin:/opt/java/openjdk/bin:/usr/share/maven/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=jre /opt/java/openjdk /opt/java/openjdk
COPY --from=maven /usr/share/maven /usr/share/maven
RUN python -m venv /opt/venv
WORKDIR /src
# Only what the package is built from (.dockerignore keeps the rest out of the context).
COPY pyproject.toml setup.py README.md ./
COPY schemas schemas
COPY proto proto
COPY feed_service feed_service
COPY spark_jobs spark_jobs
# A regular (non-editable) install: the wheel built by setup.py carries its package data and gRPC stubs.
RUN pip install . \
    && python -c "import pyspark; assert pyspark.__version__ == '${SPARK_VERSION}', pyspark.__version__"
# The Kafka connector's jars from Maven Central, once, here (feed_service/stack/spark_connector.py
# kafka_connector_jars: the ones the wheel does not ship), so that no pod ever downloads:
# - copied into the wheel's Spark jars/, on the classpath of every driver and executor JVM: a driver
#   started by spark-submit (the operator) keeps its launch classpath, the session adds no spark.jars;
# - kept in FEED_CACHE_DIR, where feedctl's local-mode jobs look for them (and then find them shipped).
# The local Maven repository (m2) is only the download's cache.
ENV FEED_CACHE_DIR=/opt/feed/cache
RUN python -c "import os, shutil, pyspark; from feed_service.stack.spark_connector import kafka_connector_jars; jars = os.path.join(os.path.dirname(pyspark.__file__), 'jars'); [print(shutil.copy2(j, jars)) for j in kafka_connector_jars()]" \
    && rm -rf /opt/feed/cache/m2

# ---- runtime
FROM ${PYTHON_IMAGE}
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends tini libnss-wrapper procps; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --system --gid=185 spark; \
    useradd --system --uid=185 --gid=spark --home-dir /opt/feed/work --no-create-home spark; \
    mkdir -p /opt/feed/work; \
    chown spark:spark /opt/feed/work
COPY --from=jre /opt/java/openjdk /opt/java/openjdk
COPY --from=build /opt/venv /opt/venv
# Writable by the spark user: a driver on a cluster master zips the project's code into it
# (spark_jobs/runtime/code_archive.py) for its executors.
COPY --from=build --chown=185:185 /opt/feed/cache /opt/feed/cache
# SPARK_HOME is the wheel's Spark, linked where the Spark images keep it.
RUN ln -s "$(/opt/venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark
COPY k8s/image/entrypoint.sh /opt/entrypoint.sh
# The Python file spark-submit starts: feedctl (k8s/stream-sparkapplication.yaml, pyFiles).
COPY k8s/image/feedctl_submit.py /opt/feed/feedctl_submit.py
ENV JAVA_HOME=/opt/java/openjdk \
    SPARK_HOME=/opt/spark \
    PATH=/opt/venv/bin:/opt/java/openjdk/bin:$PATH \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    FEED_CACHE_DIR=/opt/feed/cache \
    PYTHONUNBUFFERED=1
WORKDIR /opt/feed/work
# Numeric, so that a pod with runAsNonRoot can verify it (the manifests also set runAsUser: 185).
USER 185:185
# Spark's entrypoint: "driver ..." and "executor ..." (the Kubernetes scheduler's arguments) start Spark;
# any other command runs as it is, so `docker run IMAGE` and the manifests' `command:` run feedctl.
ENTRYPOINT ["/opt/entrypoint.sh"]
CMD ["feedctl", "serve"]
