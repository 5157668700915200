"""``python -m anyrope.check --write-reference PATH``: regenerate the shipped reference bits."""

from ..tools.check import _main

raise SystemExit(_main())
