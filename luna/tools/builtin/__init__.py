"""Luna's native tools, one module per family; each has ``register(registry, cfg)``.

May import ``tools.registry`` and the rest of ``tools``, ``config``, ``errors``, ``messages`` and
``observe``; never the agent or a front-end.
"""
