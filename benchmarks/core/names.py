"""The names a run is stored under in MLflow: one module for the writers (harness, tracker, audit) and the readers
(sweep, reports), so a renamed tag or metric cannot split them."""

from __future__ import annotations

# --- tags --------------------------------------------------------------------------------------------------
TAG_METHOD = "method"
TAG_DATASET = "dataset"
TAG_PRESET = "preset"
TAG_MODEL = "model"
TAG_SEED = "seed"
TAG_NORM = "norm"
TAG_PRECISION = "precision"  # "float32", or the autocast dtype of --amp
TAG_VIEW = "view"  # the preset's view: "matched" (one (q, T) for all) or "own_best" (each method's own recipe)
TAG_CONFIGS_TRIED = "configs_tried"  # how many configurations were tried to choose this one (the preset says)
TAG_VARIANT = "variant"  # the method's recipe options that differ from its defaults (Method.variant), or ""
TAG_MATCH_KEY = "match_key"  # runs at the same (dataset, epsilon, delta, q, T) are compared
TAG_CONFIG_KEY = "config_key"  # two runs with the same key are the same run
TAG_PID = "pid"  # the process that runs (or ran) the run, to find and stop it
TAG_HOST = "host"
TAG_OWNER = "owner"  # a token of the tracker that writes the run (tells apart the threads of one process)
TAG_HEARTBEAT = "heartbeat"  # unix time, renewed while the run is alive; a stale one means its process is gone
TAG_CLAIM = "claim"  # "pending" while a process claims the configuration, "held" once it runs it
TAG_KIND = "kind"  # "audit" for audit runs; absent for training runs
KIND_AUDIT = "audit"
KIND_MECHANISM_AUDIT = "mechanism_audit"  # `bench audit --mechanism`: a method's release on a worst-case pair
TAG_MECHANISM_RELEASE = "mechanism.release"  # which release was audited (one step, one release, one answer)
TAG_MECHANISM_VERDICT = "mechanism.verdict"  # refuted / tight to X / not tight
METRIC_MECHANISM = "mechanism.{}"  # a mechanism audit's figures: mu_claim, mu_lb, epsilon_*, tightness
PARAM_NOISE_SCALE = "mechanism.noise_scale"  # the implementation's noise as a multiple of its calibrated noise
PARAM_MECHANISM_TRIALS = "mechanism.trials_per_world"
KIND_SWEEP = "sweep"  # a `bench run` sweep's parent run: its training runs are nested under it
KIND_STUDY = "study"  # a study's parent run: its training and audit runs are nested under it
KIND_SPEED = "speed"  # an interleaved speed measurement (what `bench speed` does), its own run in a study
TAG_PARENT_RUN = "mlflow.parentRunId"  # MLflow's own: the UI nests a run under its parent
TAG_NOTE = "mlflow.note.content"  # MLflow's own: the run's description in the UI
RESOLVED_CONFIG_ARTIFACT = "resolved_config.json"  # every run's whole configuration, as an artifact
MODEL_ARTIFACT = "state_dict.pt"  # a finished run's released model, under model/, when asked (bench run --log-model)
#: the artifact a study's parent run holds its leaderboard in (an MLflow table)
LEADERBOARD_TABLE = "leaderboard.json"
#: MLflow's experiment tag for what the experiment holds: model training, so the UI opens on its runs (not on the
#: GenAI overview)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: the experiment's runs-table view (MLflow 3's shared view: an experiment tag ``mlflow.sharedViewState.KEY`` holding
#: the table's state as JSON, opened by ``#/experiments/ID/runs?viewStateShareKey=KEY``): the key metrics as columns
RUNS_VIEW_KEY = "inputdp"
RUNS_VIEW_TAG = "mlflow.sharedViewState." + RUNS_VIEW_KEY
#: the experiment's store schema (benchmarks/tracking/schema.py): set when the experiment is made; absent means 1
EXPERIMENT_SCHEMA_TAG = "inputdp.store_schema"
TAG_AUDIT_OF = "audit_of_match_key"
TAG_AUDIT_BEST_SCORE = "audit_best_score"
TAG_CANARY_KIND = "canary_kind"
TAG_PATTERN_SCALE = "pattern_scale"
TAG_AUDIT_MODE = "audit_mode"  # "one_run" (m canaries in one training run) or "multi_run" (N runs, one canary)
TAG_AUDIT_SCORES = "audit_scores"  # the scores tried, comma-separated
#: TAG_AUDIT_MODE of DP-SGD's white-box audit: m gradient canaries through its whole training (audits/gradient_canaries.py)
AUDIT_MODE_GRADIENT_CANARIES = "gradient_canaries"
#: set (to why) on an audit whose implementation was deliberately given other noise than its claim's: it must be refuted
TAG_DELIBERATELY_BROKEN = "deliberately_broken"
TAG_PRIVACY_MECHANISM = "privacy.mechanism"
TAG_PRIVACY_PROTECTS = "privacy.protects"
TAG_PRIVACY_SCOPE = "privacy.scope"
TAG_PRIVACY_NEEDS_PUBLIC_DATA = "privacy.needs_public_data"
TAG_PRIVACY_ACCOUNTANT = "privacy.accountant"  # which accountant computed the claimed epsilon
TAG_PRIVACY_ADJACENCY = "privacy.adjacency"  # the neighbouring relation of that accountant's theorem
TAG_PRIVACY_GUARANTEE = "privacy.guarantee"  # "false" where the epsilon is not a guarantee of any output
TAG_PRIVACY_NOISE = "privacy.noise"  # secret (OS entropy) or seeded from the run's seed (PrivacyClaim.noise)
TAG_PRIVACY_RELATION = "privacy.relation"  # the claim's neighbouring relation, as a key (add_remove, replace_input)
TAG_PRIVACY_COVERS = "privacy.covers"  # the relations the claim's theorem covers at its epsilon, comma-separated keys
TAG_AUDIT_RELATION = "audit_relation"  # the relation an audit's neighbouring pairs are built under (the claim's)
TAG_AUDIT_DESIGN = "audit_design"  # how an excluded canary is represented: absent, or replaced in its slot
TAG_STATUS_NOTE = "status_note"  # bookkeeping while a run is open ("started", why it was marked FAILED)
#: the tags that only say who holds an open run: removed when it FINISHES (a failed or killed run keeps them, to
#: say which process it was)
BOOKKEEPING_TAGS = (TAG_PID, TAG_HOST, TAG_OWNER, TAG_HEARTBEAT, TAG_CLAIM, TAG_STATUS_NOTE)
#: an audit run's name starts so (the training runs are METHOD-DATASET-epsEPS-sSEED)
AUDIT_RUN_PREFIX = "audit-"

# --- params (RunConfig.flat() names, and what the harness adds) ----------------------------------------------
PARAM_MODEL = "model"
PARAM_EPSILON = "privacy.epsilon"
PARAM_DELTA = "privacy.delta"
PARAM_SAMPLING_RATE = "privacy.sampling_rate"
PARAM_STEPS = "privacy.steps"
PARAM_TRAIN_EXAMPLES = "train_examples"
PARAM_HOLDOUT = "holdout"
PARAM_DATA_FINGERPRINT = "data_fingerprint"
PARAM_METHOD_OPTIONS = "method_options."  # + option name: the run's method options (RunConfig.flat())
PARAM_NOISE = "noise."  # + parameter name: the calibrated noise
PARAM_LR = "lr."  # + what Method.learning_rate records
PARAM_METHOD = "method."  # + what Method.describe reports
PARAM_NORM_USED = "norm_used"
PARAM_DEVICE = "device"
PARAM_TRAIN_SIZE = "train_size"
PARAM_TEST_SIZE = "data.test_size"
PARAM_NORMALISATION = "data.normalisation"
PARAM_DATA_NOTES = "data.notes"
PARAM_CALIBRATION_ORDER = "calibration.order"
PARAM_FEATURE_DIM = "feature_dim"
PARAM_THREADS = "perf.threads"  # the intra-op threads the run's float reductions were split over
PARAM_AUDIT = "audit.{}"  # .format(what): a multi-run audit's runs, score, threshold, direction, side
PARAM_ACCOUNTING_VERSION = "accounting.version"  # the accountant and its library's version: part of the run's key

# --- metrics -------------------------------------------------------------------------------------------------
# per epoch (per phase for an own-loop method)
METRIC_LOSS = "loss"
METRIC_TRAIN_ACCURACY = "train_accuracy"
METRIC_TEST_ACCURACY = "test_accuracy"
METRIC_TEST_LOSS = "test_loss"
METRIC_EPOCH_TIME = "epoch_time_s"
METRIC_STEPS = "steps"
METRIC_MEAN_BATCH_SIZE = "mean_batch_size"
#: how contended the epoch's timing was: the process's CPU seconds per wall second over the epoch's steps (about
#: the run's threads when it had the cores to itself), and the machine's 1-minute load average at the epoch's end
METRIC_CPU_PER_WALL = "epoch_time_cpu_per_wall"
METRIC_LOAD = "epoch_time_load_1min"
# per run
METRIC_FINAL_TEST_ACCURACY = "final_test_accuracy"
METRIC_FINAL_TRAIN_ACCURACY = "final_train_accuracy"
METRIC_WARMUP_EPOCH_TIME = "warmup_epoch_time_s"
METRIC_MEAN_EPOCH_TIME = "mean_epoch_time_s"
METRIC_TOTAL_TRAIN_TIME = "total_train_time_s"
METRIC_CALIBRATION_SECONDS = "calibration_seconds"
METRIC_FRONTEND_SECONDS = "frontend_seconds"
METRIC_EPSILON_TARGET = "epsilon_target"
METRIC_EPOCHS = "epochs"
METRIC_TOTAL_STEPS = "total_steps"
METRIC_EVAL_EXAMPLES = "eval_examples"
METRIC_CHANCE_ACCURACY = "chance_accuracy"  # 1 / classes: what a model that learnt nothing reads
TAG_AT_CHANCE = "at_chance"  # "true" where the final accuracy is at most AT_CHANCE_FACTOR x chance
AT_CHANCE_FACTOR = 1.5  # a final accuracy at most this multiple of chance: the model learnt next to nothing
#: 1 when other work shared the cores during the run's timed epochs (their median load average exceeded the run's
#: own threads by more than one busy thread): its times are not a speed comparison, and the leaderboard leaves them out
METRIC_CONTENDED = "time_contended"
METRIC_MAX_LOAD = "time_max_load_1min"
METRIC_PHASE_TIME = "time_{}_s"  # .format(phase): an own-loop method's phase, timed by the harness
METRIC_MEDIAN_EPOCH_TIME = "median_epoch_time_s"
METRIC_PEAK_MEMORY = "peak_memory_mb"
METRIC_FINAL_EPSILON_SPENT = "final_epsilon_spent"
METRIC_EPSILON_SPENT = "epsilon_spent"
METRIC_EPSILON_DD_SANITISED = "epsilon_data_dependent_sanitised"  # PATE: a report beside the claim, not the claim
METRIC_EPSILON_LB = "epsilon_lb"
#: methods that release per-example vectors (Method.releases_vectors): a rigorous lower bound on the epsilon that the
#: released vectors spend at the run's noise, and the paper's accountant's epsilon at that noise
METRIC_VECTORS_EPSILON_LB = "epsilon_vectors_lb"
METRIC_PAPER_EPSILON = "epsilon_paper_accountant"
METRIC_EPSILON_LB_CEILING = "epsilon_lb_ceiling"
METRIC_AUDIT_GUESSES = "audit_guesses"
METRIC_AUDIT_CORRECT = "audit_correct"
METRIC_AUDIT_TESTS = "audit_tests"  # the size of the Bonferroni family
METRIC_AUDIT_CANARIES = "audit_canaries"  # how many canaries (audits logged before it: unrecorded, 0 in a verdict)
METRIC_AUDIT_RUNS = "audit_runs"  # multi-run audits: the training runs behind the bound
METRIC_AUDIT_TP = "audit_tp"  # multi-run audits, on the test half: with the canary, guessed with
METRIC_AUDIT_FN = "audit_fn"
METRIC_AUDIT_FP = "audit_fp"
METRIC_AUDIT_TN = "audit_tn"
METRIC_AUDIT_FAILED = "audit_failed"
METRIC_AUDIT_SELECTION_BOUND = "audit_selection_bound"
METRIC_AUDIT_WALL = "audit_wall_s"
#: a speed run's figures per method label (.format(label)): the median step-time ratio to the reference, the
#: quartiles of the paired per-step ratios (its spread), and the median step time
METRIC_SPEED_RATIO = "speed.ratio.{}"
METRIC_SPEED_P25 = "speed.ratio_p25.{}"
METRIC_SPEED_P75 = "speed.ratio_p75.{}"
METRIC_SPEED_STEP = "speed.step_s.{}"
#: a method's memory in the speed run: torch's peak during its steps on a GPU; on a CPU its process's peak resident
#: set, measured alone in a fresh process, and that peak's growth over the process just before the first step
METRIC_SPEED_MEMORY = "speed.memory_mb.{}"
METRIC_SPEED_STEP_MEMORY = "speed.step_memory_mb.{}"
PARAM_MEMORY_KIND = "peak_memory_kind"
METRIC_AUDIT_SCORE_BOUND = "epsilon_lb.{}"  # .format(score): each score's bound
METRIC_AUDIT_SCORE_CEILING = "ceiling.{}"  # .format(score): and its ceiling
METRIC_THREAT_BOUND = "epsilon_lb.{}"  # .format(threat): the strongest bound of a threat model (THREATS)
METRIC_THREAT_CEILING = "epsilon_lb_ceiling.{}"  # .format(threat): and its ceiling
#: .format(threat): the f-DP bound (Mahloujifar et al. 2024) of the same tests against the (epsilon, delta) trade-off
#: curve, its ceiling, and the mu-GDP lower bound (a claim of mu-GDP only)
METRIC_THREAT_FDP_BOUND = "epsilon_lb_fdp.{}"
METRIC_THREAT_FDP_CEILING = "epsilon_lb_fdp_ceiling.{}"
METRIC_THREAT_GDP_MU = "mu_lb_gdp.{}"
#: .format(figure): the claimed-curve test's figures (benchmarks/audits/claimed_curve.py): its thresholds, counts and
#: p-values per threshold (``threshold.0``, ``p_value.0``, ...) and the least noise scale it excludes
METRIC_CURVE = "claimed_curve.{}"
#: .format(threat): 1 where at least one of the threat model's tests had power (its guesses could depend on the run),
#: 0 where none had: a test whose every guess is on one side ("in" for all) counts the inclusion coins, whatever the
#: mechanism, and its ceiling cannot be reached (THEORY.md, "Auditing")
METRIC_THREAT_POWER = "audit_power.{}"
#: the strongest bound among the scores of one threat model (black_box: outputs only; white_box: parameters),
#: with its ceiling: ``epsilon_lb.black_box``, ``epsilon_lb_ceiling.white_box``, ...
THREATS = ("black_box", "white_box")
#: the audit scores that read the model's outputs only (the black-box threat model); every other score is white-box
BLACK_BOX_SCORES = ("loss", "margin", "reference_rank")
