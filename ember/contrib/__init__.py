"""``ember.contrib``: counterparts of ``tvm.contrib`` modules (``utils``: temporary folders)."""
