"""What the records say: the summary rows and their statistics (speedup intervals, parity
verdicts), and the exit code a finished matrix earns. No torch here."""
