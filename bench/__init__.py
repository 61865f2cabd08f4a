"""`make bench`: every bench/*_bench.py module, each printing figures beside their baseline and target."""
