"""Every exception this package raises on purpose, in one tree (after httpx/_exceptions.py).

    VerlAsyncDapoError                  expected failures: the message says what to do, never holds a secret
    ├── InputError                      the caller's input is wrong; nothing was changed
    │   ├── UserInputError              (a ValueError) an answer, argument, flag or variable to fix
    │   │   ├── FlowError               a call out of order, or after the answers were frozen
    │   │   ├── ParamError              run parameters that do not validate (``params`` names the fields)
    │   │   ├── FeatureError            not one of the eight features
    │   │   ├── ServeConfigError        the HTTP server's configuration
    │   │   ├── VersionError            a verl version no profile covers
    │   │   ├── OverrideError           a Hydra override that cannot be rendered safely
    │   │   ├── EnvError                an environment entry that would carry a secret
    │   │   ├── PlanError               the request cannot become a launch plan
    │   │   │   └── SecretLeakError
    │   │   ├── ShapeError              a model's config.json lacks what the memory estimate needs
    │   │   ├── NotifyConfigError       a notification sink's setting
    │   │   ├── StallConfigError        the hang-detection window's settings (VAD_STALL_*)
    │   │   ├── SlurmOptionError        a SLURM run parameter (slurm_*: partition, time limit, #SBATCH lines)
    │   │   └── BudgetConfigError       the relaunch budget's settings (VAD_MAX_GPU_HOURS)
    │   └── SwanlabConfigError          (deliberately not a ValueError: see the class)
    ├── TargetError                     (a RuntimeError) Docker, the host or Ray could not do it
    │   ├── TargetUnavailable           the target cannot be reached at all
    │   │   └── TargetGone              ... and never will again: its jobs are dead
    │   ├── NvidiaSmiError              (also a ValueError) nvidia-smi printed something else than asked
    │   ├── InvalidTargetInput          (also an InputError and a ValueError) a bad name, path or argv
    │   │   └── MountRefused            a mount that would hand out the host
    │   └── (targets/ray/auth.py RayTokenError, targets/ray/api.py RayApiError → RayAuthError)
    └── StateError                      (a RuntimeError) our own state cannot be used
        ├── StoreError                  the state DB (disk full, unreadable file, a newer schema)
        │   └── StoreBusy               another process holds its lock longer than we wait: retry later
        ├── IllegalTransitionError      a status change status.py's transition table does not allow
        │   └── TerminalStateError      a run or attempt that has ended cannot change its status again
        └── SecretStoreError            a secret could not be stored or read
            ├── SecretNotFoundError     (also a KeyError)
            └── InsecureFileError

A message may be a ``wording.Say`` that names tools and arguments for an agent, commands and flags for a person:
``for_face`` renders it for the face that shows it, and ``str()`` is the MCP rendering. Faces catch
``VerlAsyncDapoError`` and show ``for_face(their face)`` (errors.py); anything else is a bug and propagates. The
stdlib bases are the ones each class had before the tree existed, so ``except ValueError`` around a parser still
catches what it caught. Every module imports them from here (one import path per name: the modules that raise them
do not re-export them), so no module needs to import a service just for one of these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verl_async_dapo.wording import Face, Say, Text

if TYPE_CHECKING:
    from pydantic import ValidationError


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, named by field; pydantic's "Value error, " noise removed. Here, below settings and
    errors.py, because both word a refused value with it (settings: a ParamError; errors.py: any face's)."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


class VerlAsyncDapoError(Exception):
    """An expected failure; the message says what is wrong and how to fix it, and never contains a secret."""

    def __init__(self, message: Text = "", params: tuple[str, ...] = ()) -> None:
        super().__init__(str(message))
        self.message = message
        # The run parameters (TrainingSettings fields) at fault: each face names them its own way (MCP: the tool
        # argument, CLI: the flag; settings.param_hint, applied by errors.user_facing_error).
        self.params = tuple(params)

    def for_face(self, face: Face) -> str:
        """The message in the words of ``face`` (tools/arguments for MCP, commands/flags for the CLI)."""
        return self.message.render(face) if isinstance(self.message, Say) else str(self)


# -- input --------------------------------------------------------------------------------------------------------


class InputError(VerlAsyncDapoError):
    """The caller's input is wrong; nothing was changed."""


class UserInputError(InputError, ValueError):
    """Bad input from the user or the agent; the message says how to fix it. Nothing was changed."""


class FlowError(UserInputError):
    """A call out of order or after the answers were frozen; the message names what to do."""


class ParamError(UserInputError):
    """Run parameters that do not validate; ``params`` names the fields (each face names them its own way)."""


class FeatureError(UserInputError):
    """A feature name that is not one of the eight, with the list of valid names in the message."""


class ServeConfigError(UserInputError):
    """The HTTP server refuses to start with this configuration; the message says what to set."""


class VersionError(UserInputError):
    """A verl version string that cannot be parsed or that no profile covers."""


class OverrideError(UserInputError):
    """An override that cannot be rendered safely, or a key set twice in one plan."""


class EnvError(UserInputError):
    """An environment entry that would put a secret into the plan, or an invalid name."""


class PlanError(UserInputError):
    """The request cannot become a launch plan; the message says what to change."""


class SecretLeakError(PlanError):
    """A secret value given to the builder would appear in the plan (names the field, not the value)."""


class ShapeError(UserInputError):
    """config.json lacks what the estimate needs; the message names the key."""


class NotifyConfigError(UserInputError):
    """A notification setting is wrong; the message says what to fix and never shows a URL or secret."""


class StallConfigError(UserInputError):
    """A hang-detection setting (VAD_STALL_*) is not a valid number; the message names the variable."""


class SlurmOptionError(UserInputError):
    """A SLURM run parameter (slurm_*) that cannot be used; the message names it and the rule (slurm_options.py)."""


class BudgetConfigError(UserInputError):
    """A relaunch-budget setting (VAD_MAX_GPU_HOURS) is not a valid number; the message names the variable."""


class SwanlabConfigError(InputError):
    """Invalid SwanLab settings; the message says what to fix and never contains the API key.

    Deliberately not a ValueError: raised inside a pydantic validator it propagates as itself
    instead of becoming a ValidationError, whose ``errors()`` would carry the rejected input (the
    key) even with ``hide_input_in_errors``.
    """


# -- targets ------------------------------------------------------------------------------------------------------


class TargetError(VerlAsyncDapoError, RuntimeError):
    """A target operation failed; the message says what is missing and how to fix it."""


class TargetUnavailable(TargetError):
    """The target cannot be reached at all (no Docker Engine, container gone, cluster down)."""


class TargetGone(TargetUnavailable):
    """The target itself no longer exists or is not running: every job that ran in it is dead.

    Unlike an unreachable Docker Engine (which may come back with the job still running), this is final
    for the attempt, so the supervisor records it instead of waiting forever.
    """


class NvidiaSmiError(TargetError, ValueError):
    """The text is not what the query prints (another query, an error message)."""


class InvalidTargetInput(TargetError, InputError, ValueError):
    """A name, path, image or value was refused before anything ran (catchable as either base)."""


class MountRefused(InvalidTargetInput):
    """A mount that would hand out the host; the message says which rule and what to mount instead."""


# -- our own state ------------------------------------------------------------------------------------------------


class StateError(VerlAsyncDapoError, RuntimeError):
    """Our own state (the DB, the secret store) cannot be used; the message says what to fix."""


class StoreError(StateError):
    """The state store cannot be used (disk full, unreadable file, a newer schema)."""


class StoreBusy(StoreError):
    """Another process holds the state store's lock longer than we wait; a retry later may succeed."""


class IllegalTransitionError(StateError):
    """A run or attempt status change that status.py's transition table does not allow. Not a StoreError: retrying
    the write can never succeed, so nothing may treat it as a transient failure of the store."""


class TerminalStateError(IllegalTransitionError):
    """A run or attempt that reached a terminal status cannot change it (status.py)."""


class SecretStoreError(StateError):
    """A secret could not be stored or read; the message never contains a secret value."""


class SecretNotFoundError(SecretStoreError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the argument; keep the plain message
        return str(self.args[0]) if self.args else "secret not found"


class InsecureFileError(SecretStoreError):
    """A file meant to be private is readable or writable by other users."""
