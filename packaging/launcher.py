"""Entry script of the PyInstaller bundle: the same dispatcher as the `swarmscope` console script
(no subcommand starts the window; `run`, `trace`, ... work from the bundle too)."""
import sys

from engine.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
