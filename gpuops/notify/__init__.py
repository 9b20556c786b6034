"""Who is told when it matters: `[notify]`'s messages through apprise (notifier.py), their lines (texts.py)."""
