# recorder/ - filled in as the part grows.
