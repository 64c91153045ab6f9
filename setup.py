"""alf_async: an asynchronous actor-learner RL trainer for TensorFlow 2."""

from setuptools import find_packages, setup

# The dependency set verified together (Python 3.11). tf-agents 0.19 is the
# last release and is tested against TF 2.15; it needs numpy < 2, and
# typing-extensions newer than 4.5 breaks TF 2.15's tracing. For NVIDIA GPUs
# install `tensorflow[and-cuda]==2.15.1` in place of `tensorflow-cpu`.
INSTALL_REQUIRES = [
    "tensorflow-cpu==2.15.1",
    "tf-agents==0.19.0",
    "tensorflow-probability==0.23.0",
    "tensorboard==2.15.2",
    "gin-config==0.5.0",
    "absl-py==2.5.1",
    "numpy==1.26.4",
    "gymnasium==0.29.1",
    "typing-extensions==4.5.0",
    # TensorBoard leaves grpcio open; newer releases need protobuf 5+, which TF 2.15
    # refuses, and pip backtracks through a dozen of them before finding this one.
    "grpcio==1.74.0",
]

MUJOCO = ["mujoco==3.2.7", "imageio==2.38.1"]
BOX2D = ["box2d==2.3.10"]
# ale-py 0.10.2 carries the Atari ROMs in its wheel (0.11+ needs gymnasium 1.x);
# newer opencv builds pull numpy 2.
ATARI = ["ale-py==0.10.2", "opencv-python-headless==4.11.0.86"]
# minatar pulls pandas and seaborn; these pins keep numpy < 2.
MINATAR = ["minatar==1.0.15", "pandas==2.2.3", "scipy==1.13.1", "seaborn==0.13.2"]
# Reverb bare: dm-reverb[tensorflow] would pull full tensorflow next to tensorflow-cpu.
# EnvPool's C++ vectorised envs; newer optree needs typing-extensions >= 4.10, which
# breaks TF 2.15.
ENVPOOL = ["envpool==0.8.4", "optree==0.15.0", "dm-env==1.6", "types-protobuf==7.35.1.20260906"]
# python -m alf_async.experiment report: bootstrap intervals and curves.
EXPERIMENT = ["matplotlib==3.8.4", "scipy==1.13.1"]
# python -m alf_async.tune: Optuna with a SQL storage (SQLite, or PostgreSQL through
# psycopg2). SQLAlchemy 2 and newer alembic need typing-extensions >= 4.6, which breaks
# TF 2.15's tracing.
TUNE = ["optuna==4.5.0", "optuna-dashboard==0.20.0", "PyYAML==6.0.2", "SQLAlchemy==1.4.54",
        "alembic==1.13.3", "psycopg2-binary==2.9.10", *EXPERIMENT]
# The guides as a site (mkdocs.yml): MkDocs with Material and an API reference
# generated from the docstrings; tests/test_docs.py runs the strict build.
DOCS = ["mkdocs==1.6.1", "mkdocs-material==9.5.49", "mkdocstrings==0.27.0",
        "mkdocstrings-python==1.13.0", "griffe==1.15.0", "mkdocs-autorefs==1.2.0"]
REPLAY = ["dm-reverb==0.14.0", "dm-tree==0.1.10", "portpicker==1.6.0"]
# The launch on a Ray cluster (--backend=ray). Plain ray: ray[default] past 2.55.1
# needs pydantic 2, which tf-agents' typing-extensions pin forbids.
RAY = ["ray==2.60.0"]
# --tracker=mlflow / --tracker=wandb. Newer releases need typing-extensions >= 4.8 or
# pydantic 2, which tf-agents' pins forbid; full mlflow brings `mlflow server` and `mlflow ui`.
MLFLOW = ["mlflow==2.22.1", "pydantic==1.10.27", "packaging==24.2"]
WANDB = ["wandb==0.19.11", "pydantic==1.10.27"]

# RLDS datasets (TFDS directories): train.record_dataset, play --record_dataset, and
# exp_replayer='dataset' / 'hybrid'. Unpinned, TFDS's deps bring protobuf 6 and
# tensorflow-metadata 1.21, which TF 2.15 refuses (it needs protobuf < 5).
DATASETS = ["tensorflow-datasets==4.9.4", "rlds==0.1.8", "tensorflow-metadata==1.15.0",
            "protobuf==4.25.9", "array-record==0.8.6", "googleapis-common-protos==1.75.0"]

setup(
    name="alf_async",
    version="0.1.0",
    description="Asynchronous actor-learner reinforcement learning for TensorFlow 2",
    packages=find_packages(include=["alf_async", "alf_async.*"]),
    python_requires=">=3.11,<3.12",
    install_requires=INSTALL_REQUIRES,
    extras_require={
        # gymnasium 0.29.1's MuJoCo *-v4 envs; not gymnasium[mujoco], which pulls mujoco 4.
        "mujoco": MUJOCO,
        # A prebuilt Box2D wheel; gymnasium[box2d] wants box2d-py, which needs swig.
        "box2d": BOX2D,
        # Atari through ALE (DeepMind preprocessing) and MinAtar's 10x10 pixel games.
        "atari": ATARI,
        "minatar": MINATAR,
        # create_environment.env_load_fn = @load_envpool_env
        "envpool": ENVPOOL,
        # Uniform replay in a Reverb table (exp_replayer='uniform': SAC, DQN).
        "replay": REPLAY,
        # Actor processes on other hosts, talking to the learner through Reverb.
        "distributed": REPLAY,
        # The supervised launch on a Ray cluster (launch --backend=ray).
        "ray": [*REPLAY, *RAY],
        # Reports of multi-seed experiments, and hyper-parameter search.
        "experiment": EXPERIMENT,
        "tune": TUNE,
        # Runs also reported to MLflow or Weights & Biases (--tracker).
        "mlflow": MLFLOW,
        "wandb": WANDB,
        "docs": DOCS,
        # Experience recorded as RLDS datasets; offline and hybrid learning from them.
        "datasets": DATASETS,
        "test": ["pytest==9.2.0", "pytest-timeout==2.4.0", "pytest-xdist==3.8.0",
                 "execnet==2.1.2", "matplotlib==3.8.4",
                 *MUJOCO, *BOX2D, *ATARI, *MINATAR, *ENVPOOL, *REPLAY, *RAY, *TUNE,
                 *MLFLOW, *WANDB, *DOCS, *DATASETS],
        "plot": ["matplotlib==3.8.4"],
    },
)
