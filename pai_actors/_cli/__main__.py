"""``python -m pai_actors._cli``: the ``pai-actors`` command."""

from .main import main

raise SystemExit(main())
