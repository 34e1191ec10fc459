"""The paper's evaluations (NER, MTEB, domain classification), built on the public API only."""
