# controller/ - filled in as the part grows.
