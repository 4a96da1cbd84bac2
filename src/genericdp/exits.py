"""Exit codes, one place for every command (docs/reference.md "Exit codes" lists them all).

For people and for CI:
  0    success
  1    the config is invalid (every problem is printed, with file:line:column)
  2    usage error: bad flags or bad GENERICDP_* settings
  3    the environment is unusable (a device root or socket directory is missing)
  4    simulate: a resource did not register, or an allocation was refused;
       convert: the config is written, but part of squat's is NOT CONVERTED
  130  interrupted (Ctrl-C) where no command catches it: serve and simulate
       stop cleanly on SIGINT and SIGTERM, and exit 0
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3
EXIT_FAILED = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
