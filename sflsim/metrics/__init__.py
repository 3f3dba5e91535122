"""Records derived from the trace, and the results directory writer."""
