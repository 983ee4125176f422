"""Run: the parts of a training loop wired so that checkpoints, curves and the step agree.

See :class:`Run`; the package's modules are its parts.
"""

from globalstep.run._run import (
    ConfigDriftWarning,
    GeneratorState,
    Ranks,
    Rollback,
    Run,
    config_differences,
)

__all__ = ["ConfigDriftWarning", "GeneratorState", "Ranks", "Rollback", "Run"]
