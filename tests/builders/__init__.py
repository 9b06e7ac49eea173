"""The builders of the domain objects tests need, in one place: no test module imports another.

- reports: reports as agents send them (an EDAC report, its payload, a CE storm)
- observations: the report sections derive() reads, and runners that feed reports in order
- remediations: rules, rulesets, inventoried hosts, firings and the remediations they start,
  host results of the hand-off to cyborg
- policies: one firing at a time for the decision-policy and admission-gate tests
- repairs: a host taken through its ticket and its repair on the reports' own clock
- tickets: a DIMM ticket opened through the real ingest path
- people: users who sign in and API tokens
- envelopes: cyborg's signed step envelopes
- rasdaemon: rows of rasdaemon's mce_record table
- runtime: the central runtime around a test's database (as api/runtime.py builds it), rebuilt with fakes
"""
