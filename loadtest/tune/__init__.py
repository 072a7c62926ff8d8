"""`graphserve tune batching`: the search for batching parameters (`search`) and its command."""
