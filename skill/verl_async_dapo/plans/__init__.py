"""Everything before a launch: the one plan builder (``launching``), previews of a launch (``planning``), the
Hydra compose of the overrides inside the target (``prelaunch``), and the checks against a target (``preflight``,
``preflight_memory``). Import the modules themselves: this package hands on no names."""
