"""``python -m globalstep`` runs the command line."""

from globalstep._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
