"""``python -m anyrope.check --write-reference PATH``: regenerate the shipped reference bits."""

from ..tools._cli import check_main

raise SystemExit(check_main())
