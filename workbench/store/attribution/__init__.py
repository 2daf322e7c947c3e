"""Trace columns -> one run's tables: the rules file (data) mapping events to stages and requests,
nesting, batch-mates, exclusive stage times. Shared by every format; imports columns/, never an importer."""
