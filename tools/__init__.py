"""Release tooling: versions (tools/versions.py). Standard library only."""
