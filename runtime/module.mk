# runtime/ - filled in as the part grows.
