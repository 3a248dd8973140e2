"""Luna: a self-hosted personal AI agent for one homelab box."""

__version__ = "0.1.0"
