"""Research runs: experiments about the encoder and its training, apart from the benchmarks a user reruns."""
