"""The contracts, written once: a suite and its cells, the recipe, what a trained cell returns, the
selection and score rule, study names and output paths."""
