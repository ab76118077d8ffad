"""Scripts that reproduce the five papers' headline results (docs/SPEC.md §6); docs/REPRODUCTION.md shows them."""
