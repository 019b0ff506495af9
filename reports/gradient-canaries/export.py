"""Each run's likelihood-ratio trade-off table, from the store the audits logged to, beside its JSON in runs/ (what
plot.py draws): python export.py sqlite:////ABS/PATH/gradient-canaries.db"""

import json
import shutil
import sys
from pathlib import Path

import mlflow

HERE = Path(__file__).parent
ARTIFACT = "gradient_canaries_trade_off.csv"


def main(tracking_uri: str) -> None:
    for path in sorted((HERE / "runs").glob("*_s[0-9].json")):
        run_id = json.loads(path.read_text())["run_id"]
        local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=ARTIFACT, tracking_uri=tracking_uri)
        shutil.copyfile(local, path.with_name(f"{path.stem}_trade_off.csv"))
        print(f"{path.stem}: {run_id}")


if __name__ == "__main__":
    main(sys.argv[1])
