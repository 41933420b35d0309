"""Refusals of the Spark doors that need no Spark: what was passed instead of a DataFrame, named by its module and
by the function actually called."""

from __future__ import annotations

import pandas as pd
import pytest

from mpcommit.errors import UsageError
from mpcommit.spark import write, writer


def test_a_pandas_dataframe_is_named_by_its_module_and_the_function_called() -> None:
    frame = pd.DataFrame({"a": [1]})
    with pytest.raises(UsageError) as by_writer:
        writer(frame)  # type: ignore[arg-type]
    message = str(by_writer.value)
    assert message.startswith("mpcommit.spark.writer takes a PySpark DataFrame, got pandas.core.frame.DataFrame")
    assert "spark.createDataFrame(data)" in message and "mpcommit.spark.write " not in message
    with pytest.raises(UsageError, match=r"^mpcommit\.spark\.write takes a PySpark DataFrame, got "
                                         r"pandas\.core\.frame\.DataFrame"):
        write(frame, "s3://bucket/t")  # type: ignore[arg-type]


def test_a_builtin_value_is_named_plainly() -> None:
    with pytest.raises(UsageError, match=r"writer takes a PySpark DataFrame, got list\. Nothing was written"):
        writer([1, 2])  # type: ignore[arg-type]
