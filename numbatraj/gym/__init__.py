"""Record Gymnasium environments into trajectory stores (the ``gym`` extra).

:class:`StoreRecorder` wraps one env, :class:`VectorStoreRecorder` a vector env (each sub-env
recorded as its own episodes).  The space-to-column mapping is
:mod:`numbatraj.data.spaces`.
"""

from numbatraj.gym.recorder import StoreRecorder, VectorStoreRecorder

__all__ = ["StoreRecorder", "VectorStoreRecorder"]
