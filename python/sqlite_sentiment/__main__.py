"""python -m sqlite_sentiment: the sqlite-sentiment command (cli.py)."""
import sys

from .cli import main

sys.exit(main())
