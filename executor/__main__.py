"""`python -m executor`: see `executor._cli`."""

from executor._cli import main

raise SystemExit(main())
