"""`python -m sievemq` runs the command line."""

from sievemq.cli import main

raise SystemExit(main())
