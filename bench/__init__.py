"""boxmaker's benchmarks (SPEC §17): each measure beside the machine's own floor, in one run."""
