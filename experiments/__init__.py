"""Scripts that reproduce the five papers' headline results (SPEC §6); docs/REPRODUCTION.md shows them."""
