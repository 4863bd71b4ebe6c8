"""verl-async-dapo: launch and supervise verl DAPO training from an AI agent."""

__version__ = "0.1.0"
