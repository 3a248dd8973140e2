"""A question to ranked hits: query planning, keyword and vector search, fusion, recall.

Reads luna.memory.storage (the store, the session log, the vectors' RAM copy) and is given
query vectors by its caller; never imports embedding or the facade, so ranking can be tested
and benchmarked without a model.
"""
