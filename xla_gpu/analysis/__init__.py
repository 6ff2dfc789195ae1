"""Analyses of HLO fusions: output-to-input indexing maps and the fusion's
hero (which emitter XLA would choose)."""
