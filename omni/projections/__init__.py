"""Pure folds over events and items: no I/O."""
