"""Every default in one table. The library, the CLI's --help and the README read
these names; change a default here and it changes everywhere. No imports.

Budgets are per training run in samples; evaluation cadence in training samples;
times in seconds, rates in Hz, power in W.
"""

# --- profiling (Sec. 4.1) ------------------------------------------------------------
#: batch sizes `undercap profile` tries; those that do not fit in memory are skipped
PROFILE_BATCH_SIZES = (8, 16, 32, 64, 128, 256, 512)
#: warm-up mini-batches per configuration (allocation, cuDNN autotuning, DVFS settling)
PROFILE_WARMUP_STEPS = 2
#: measured mini-batches per configuration
PROFILE_MEASURE_STEPS = 5
#: power readings per second while profiling
PROFILE_SAMPLE_RATE_HZ = 200.0

# --- power readings -------------------------------------------------------------------
#: power readings per second while training (the guard's input)
TRAIN_SAMPLE_RATE_HZ = 100.0
#: the robust peak is the highest moving average over this window (devices/sampler.py)
PEAK_WINDOW_S = 0.2
#: the power guard steps the clock down after power stayed above the limit this long
GUARD_WINDOW_S = 1.0

# --- estimating r(b) on a proxy (Sec. 4.2) ----------------------------------------------
ESTIMATE_BATCH_SIZES = (8, 16, 32, 64, 128)
ESTIMATE_SEEDS = 3
ESTIMATE_MAX_SAMPLES = 20_000
ESTIMATE_EVAL_EVERY_SAMPLES = 128
#: with no absolute target: this fraction of the largest batch's best accuracy
ESTIMATE_TARGET_FRACTION = 0.95

# --- pre-training ---------------------------------------------------------------------
PRETRAIN_EPOCHS = 5.0
PRETRAIN_BATCH_SIZE = 64

# --- device training (`undercap train`) -------------------------------------------------
TRAIN_MAX_SAMPLES = 100_000
TRAIN_EVAL_EVERY_SAMPLES = 2_000
#: checkpoint every this many device seconds of training
CHECKPOINT_EVERY_S = 60.0

# --- `undercap run` and `undercap compare` ------------------------------------------------
RECIPE_BATCH_SIZES = (8, 16, 32, 64, 128, 256)
RECIPE_MAX_SAMPLES = 20_000
RECIPE_EVAL_EVERY_SAMPLES = 256
COMPARE_SEEDS = 3

# --- power caps that change during training ----------------------------------------------
#: a live power source (--power-source FILE) is read again every this many seconds
POWER_SOURCE_POLL_S = 10.0

# --- devices --------------------------------------------------------------------------
#: the device commands use when none is named
DEVICE = "sim:jetson-nano"
#: where crash-restore state files go ($UNDERCAP_STATE_DIR overrides)
STATE_DIR = "var/lib/undercap"
