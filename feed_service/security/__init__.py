"""Security: who may reach what (roles and their grants), the stack's certificates and the secrets'
files. docs/security.md has the threat model."""
