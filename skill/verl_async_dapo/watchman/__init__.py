"""The watchman: hang detection and the supervisor's notification hooks (kept out of supervisor.py)."""
