"""The exported plain ranker's model type, which plain loaders do not know.

The harness truncates a pair by dropping the OLDEST context first and the response's end
(``tokenization_harness.pair_lengths``); no truncation setting of transformers or tokenizers says
that (one truncation side serves both texts). A folder that loaded as a plain ``bert`` model would
take the plain BERT tokenizer and score long pairs otherwise, without a word. So ``harness export``
writes ``model_type: harness_bert`` with this file and an ``auto_map``: ``AutoConfig``,
``AutoModelForSequenceClassification`` and sentence-transformers' ``CrossEncoder`` refuse the
folder unless ``trust_remote_code=True``, which also loads the harness's tokenizer
(docs/exchange.md). The weights are ``BertForSequenceClassification``'s, name for name.

The file needs transformers 5 only (no harness): it is loaded from the exported folder.
"""

from __future__ import annotations

from transformers import BertConfig, BertForSequenceClassification

MODEL_TYPE = "harness_bert"


class HarnessBertConfig(BertConfig):  # type: ignore[misc]
    """BERT's configuration under the harness's model type."""

    model_type = MODEL_TYPE


class HarnessBertForSequenceClassification(BertForSequenceClassification):  # type: ignore[misc]
    """BERT with one output logit, the relevance score."""

    config_class = HarnessBertConfig
