"""What SQL may appear where. Allowlists, never denylists: anything not named here is refused.

Row-level expressions (WHERE, aggregate arguments, GROUP BY expressions) run upstream over private
rows, so they must be total (never raise depending on the data) and free of side effects; the
rewrite makes division and integer casts total. Post-processing expressions run over noisy values
only, so they may use any deterministic, side-effect-free function.
"""

from __future__ import annotations

from sqlglot import exp

# The comparisons (=, <>, <, <=, >, >=, IS [NOT] DISTINCT FROM): allowed in row-level
# expressions, and their operands brought to one type (dpsql.sql.rewrite.float_safe).
COMPARISONS: tuple[type[exp.Expr], ...] = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,  # IS NOT DISTINCT FROM
    exp.NullSafeNEQ,  # IS DISTINCT FROM
)

# Structural nodes allowed in row-level expressions.
ROW_LEVEL_NODES: tuple[type[exp.Expr], ...] = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.Neg,
    exp.Not,
    exp.And,
    exp.Or,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.IntDiv,
    *COMPARISONS,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Escape,  # [I]LIKE ... ESCAPE 'c': a one-character constant (dpsql.sql.totality)
    exp.Case,
    exp.If,
    exp.Cast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Coalesce,
    exp.Nullif,
    exp.Greatest,
    exp.Least,
    exp.Abs,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Trunc,  # TRUNC(x[, d]): toward zero; d an integer constant (dpsql.sql.totality)
    exp.WidthBucket,  # constant bounds and count, a clamped operand (dpsql.sql.width_bucket)
    exp.Sign,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Trim,
    exp.Substring,
    exp.Concat,
    exp.DPipe,
    exp.TimestampTrunc,
    exp.DateTrunc,
    exp.Extract,
    exp.Var,
    exp.Placeholder,
    exp.Parameter,
    exp.Tuple,
    # constant date/time values (checked in dpsql.sql.totality: bounded intervals and years)
    exp.Interval,
    exp.CurrentTimestamp,
    exp.CurrentDate,
    exp.Localtimestamp,
    exp.StrToTime,  # to_timestamp('constant', 'format'), checked to parse
    exp.StrToDate,  # to_date('constant', 'format'), checked to parse
    exp.UnixToTime,  # to_timestamp(epoch seconds): a constant number within years 1..9999
    exp.TimeToStr,  # to_char(date/timestamp, 'constant format')
)

# Casts to these types cannot fail for any input, or are made total by the rewrite.
TEXT_TYPES = {exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR}
NUMERIC_TYPES = {
    exp.DataType.Type.DECIMAL,
    exp.DataType.Type.DOUBLE,
    exp.DataType.Type.FLOAT,
    exp.DataType.Type.BIGDECIMAL,
}
INTEGER_TYPES = {
    exp.DataType.Type.INT,
    exp.DataType.Type.BIGINT,
    exp.DataType.Type.SMALLINT,
    exp.DataType.Type.TINYINT,
}
INTEGER_RANGE = {
    exp.DataType.Type.SMALLINT: (-32768, 32767),
    exp.DataType.Type.TINYINT: (-32768, 32767),
    exp.DataType.Type.INT: (-2147483648, 2147483647),
    exp.DataType.Type.BIGINT: (-9223372036854775808, 9223372036854775807),
}

# Aggregates dpsql answers with a DP mechanism, by sqlglot class -> PostgreSQL output name.
DP_AGGREGATES: dict[type[exp.Expr], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.VariancePop: "var_pop",
    exp.Variance: "var_samp",
    exp.Stddev: "stddev",
    exp.StddevPop: "stddev_pop",
    exp.StddevSamp: "stddev_samp",
}

# Aggregates that return raw values (never answerable).
RAW_VALUE_AGGREGATES: tuple[type[exp.Expr], ...] = (
    exp.ArrayAgg,
    exp.GroupConcat,
    exp.JSONArrayAgg,
    exp.JSONObjectAgg,
    exp.AnyValue,
    exp.First,
    exp.Last,
)

# Post-processing (over noisy values): the row-level set plus harmless numeric functions.
POST_NODES: tuple[type[exp.Expr], ...] = (
    *ROW_LEVEL_NODES,
    exp.Pow,
    exp.Sqrt,
    exp.Ln,
    exp.Log,
    exp.Exp,
    exp.Trunc,
)


def aggregate_name(node: exp.Expr) -> str | None:
    """PostgreSQL's output column name for an aggregate call, or None if not a DP aggregate."""
    return DP_AGGREGATES.get(type(node))


def is_aggregate(node: exp.Expr) -> bool:
    return isinstance(node, exp.AggFunc) or isinstance(node, exp.WithinGroup)
