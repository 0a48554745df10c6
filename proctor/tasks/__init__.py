"""Task specs, families and the registry (spec string -> Task objects)."""
