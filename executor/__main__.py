"""`python -m executor`: see `executor._cli.main`."""

from executor._cli.main import main

raise SystemExit(main())
