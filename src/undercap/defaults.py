"""Every default in one table. The library, the CLI's --help and the README read
these names; change a default here and it changes everywhere. No imports.

Budgets are per training run in samples; evaluation cadence in training samples;
times in seconds, rates in Hz, power in W.
"""

# --- profiling (Sec. 4.1) ------------------------------------------------------------
#: batch sizes `undercap profile` tries; those that do not fit in memory are skipped
PROFILE_BATCH_SIZES = (8, 16, 32, 64, 128, 256, 512)
#: warm-up mini-batches per batch size (allocation, cuDNN autotuning); a clock change
#: needs none (profile/measure.py)
PROFILE_WARMUP_STEPS = 1
#: fewest measured mini-batches per configuration (two give a confidence interval)
PROFILE_MEASURE_STEPS = 2
#: most measured mini-batches per configuration, whatever the confidence intervals say
PROFILE_MAX_STEPS = 50
#: a configuration is measured for at least this many power windows (devices.base.
#: power_window_s: the robust-peak window, widened for slow sensors)
PROFILE_MIN_WINDOWS = 3.0
#: stop measuring once the 95% confidence interval of time per sample is within this
#: fraction of it ...
PROFILE_TIME_REL_TOL = 0.02
#: ... and that of the peak power (over repeated windows) within this fraction of it
PROFILE_PEAK_REL_TOL = 0.03
#: power readings per second while profiling
PROFILE_SAMPLE_RATE_HZ = 200.0

# --- the safety margin between a profiled peak and the limit (profile/margin.py) -----
#: the training run the margin is sized for: a day of power windows ...
MARGIN_RUN_S = 86_400.0
#: ... in which a window above the limit from sensor noise has at most this probability
MARGIN_ALPHA = 0.01

# --- power readings -------------------------------------------------------------------
#: power readings per second while training (the guard's input)
TRAIN_SAMPLE_RATE_HZ = 100.0
#: the robust peak is the highest moving average over this window (devices/sampler.py)
PEAK_WINDOW_S = 0.2
#: a power reading above this (or negative, or not a number) is one no sensor of a
#: single GPU or board can give: set aside with a warning, never a peak (the largest
#: single-GPU boards draw about 1 kW; a Jetson under 100 W)
MAX_PLAUSIBLE_POWER_W = 5000.0
#: the shortest power window the guard judges (devices.base.power_window_s widens it
#: for slow sensors); the robust peak's window, so the guard acts on what the limit means
GUARD_WINDOW_S = PEAK_WINDOW_S
#: a power window holds at least this many sensor updates (devices.base.power_window_s)
SENSOR_UPDATES_PER_WINDOW = 2

# --- estimating r(b) on a proxy (Sec. 4.2) ----------------------------------------------
ESTIMATE_BATCH_SIZES = (8, 16, 32, 64, 128)
ESTIMATE_SEEDS = 3
ESTIMATE_MAX_SAMPLES = 20_000
ESTIMATE_EVAL_EVERY_SAMPLES = 128
#: with no absolute target: this fraction of the largest batch's best accuracy
ESTIMATE_TARGET_FRACTION = 0.95
#: r(b) from a slice of the target's own training split (--proxy-slice): the size the
#: docs suggest, and the slice's target accuracy: the device run's target, capped at
#: this fraction of the best accuracy the slice's largest batch reaches (a slice seldom
#: reaches the full data's target). The sizes and target rules measured are in
#: docs/results/index.md ("r(b) from a slice of the target").
SLICE_FRACTION = 0.25
SLICE_TARGET_FRACTION = 0.95
#: a seed that spends the whole budget and ends this far (absolute accuracy) below the
#: target shows its batch size cannot get there: its other seeds are skipped (they differ
#: in data order and head init only; their best accuracies spread by well under 2 points
#: in benchmarks/results' efficiency curves). A nearer miss runs them: they may still cross.
ESTIMATE_HOPELESS_GAP = 0.02
#: --executor ray (estimate/ray_executor.py): Ray retries a run whose worker or node
#: died this many times (Ray's max_retries; a Python error in the run is not retried)
RAY_RUN_RETRIES = 3
#: a local Ray's object store: records and weights pass through it, nothing bigger
#: (Ray's default, 30% of memory, is far more than an estimate needs)
RAY_OBJECT_STORE_BYTES = 256 * 1024**2
#: --ray-address is checked with a TCP connect this long before ray.init, which
#: retries an unreachable head for about a minute
RAY_CONNECT_TIMEOUT_S = 5.0

# --- pre-training ---------------------------------------------------------------------
PRETRAIN_EPOCHS = 5.0
PRETRAIN_BATCH_SIZE = 64

# --- device training (`undercap train`) -------------------------------------------------
TRAIN_MAX_SAMPLES = 100_000
TRAIN_EVAL_EVERY_SAMPLES = 2_000
#: "sparse" (train/loop/evalplan.py: far looks, sequential looks; the same time to accuracy) or
#: "dense" (the whole held-out split at every grid point)
TRAIN_EVAL_SCHEDULE = "sparse"
#: held-out samples per forward pass of a device run's evaluation; a sparse look checks
#: its verdict after each (train/loop/evalplan.py): on a GPU a batch is mostly fixed cost
TRAIN_EVAL_BATCH = 512
#: checkpoint every this many device seconds of training
CHECKPOINT_EVERY_S = 60.0

# --- `undercap run` and `undercap compare` ------------------------------------------------
RECIPE_BATCH_SIZES = (8, 16, 32, 64, 128, 256)
RECIPE_MAX_SAMPLES = 20_000
RECIPE_EVAL_EVERY_SAMPLES = 256

# --- power caps that change during training ----------------------------------------------
#: a live power source (--power-source FILE) is read again every this many seconds
POWER_SOURCE_POLL_S = 10.0
#: a paused run (no configuration fits the cap) gives up after waiting this long for
#: power, in seconds of the schedule's clock (exit 4, checkpointed): longer than a night
#: off a solar panel, short of a board left waiting for days
MAX_POWER_WAIT_S = 86_400.0

# --- devices --------------------------------------------------------------------------
#: the device commands use when none is named
DEVICE = "sim:jetson-nano"
#: the arithmetic a run trains in: fp32, or mixed precision (torch.autocast) with 16-bit
#: floats, fp16 (with a GradScaler) or bf16; "auto" chooses among those the device runs
PRECISIONS = ("fp32", "fp16", "bf16")
PRECISION = "fp32"
#: where crash-restore state files go ($UNDERCAP_STATE_DIR overrides)
STATE_DIR = "var/lib/undercap"

# --- `undercap estimate`: the evaluation schedule (estimate/evalsched.py) -----------------
#: "sparse" (sequential looks, far jumps: dense's N(b) for a fraction of the evaluations)
#: or "dense"
ESTIMATE_EVAL_SCHEDULE = "sparse"
#: an estimate's sequential look checks its verdict every this many held-out items (its
#: evaluation batch on a CPU: a check is free there; estimate/evalsched.py)
ESTIMATE_CHECK_SAMPLES = 128
#: a sequential look (an estimate's or a device run's) rules out a point whose
#: whole-split metric reaches the threshold with probability at most this (Bonferroni
#: over its checks): 2 Phi(-3), the two z = 3 screens of the schedule before it
ESTIMATE_LOOK_ERROR = 2.7e-3
#: far from the target (an estimate's and a device run's), the next look is this factor
#: times the samples trained so far (1.25: a fifth of the run replayed at most; 1.5
#: looked less often but replayed more)
ESTIMATE_SPARSE_GROWTH = 1.25
#: "far": a look shows the accuracy below target - this gap (with the margin)
ESTIMATE_SPARSE_FAR_GAP = 0.05
#: held-out samples per forward pass in a sparse CPU run's evaluations and looks (dense
#: runs and GPUs keep 512: a GPU batch is mostly fixed cost)
ESTIMATE_SPARSE_EVAL_BATCH = 128
