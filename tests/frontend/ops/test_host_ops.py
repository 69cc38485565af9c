"""NonMaxSuppression and Unique (computed on the host per distinct input value) against
onnxruntime on random data: both box formats, corners given either way round, every
threshold input present or not, runs with new values, and the refusal of an input too
large to compile per value."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.ops.shape_models import check, node_model

pytest.importorskip("onnxruntime")


def _boxes(rng, batches, n, center):
    """Random boxes, clustered so that many overlap; corners sometimes swapped."""
    centre = rng.uniform(0, 4, (batches, n, 2))
    size = rng.uniform(0.5, 2.0, (batches, n, 2))
    if center:
        return np.concatenate([centre, size], axis=-1).astype(np.float32)
    lo, hi = centre - size / 2, centre + size / 2
    boxes = np.concatenate([lo, hi], axis=-1)
    swap = rng.random((batches, n)) < 0.3
    boxes[swap] = boxes[swap][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("inputs", ["all", "no_score_threshold", "boxes_only"])
def test_nms_matches_onnxruntime(rng, center, inputs):
    boxes = _boxes(rng, 2, 13, center)
    scores = rng.random((2, 3, 13)).astype(np.float32)
    scores[0, 0, :4] = 0.5  # ties: the lower index first
    slots = [("b", boxes), ("s", scores)]
    if inputs != "boxes_only":
        slots += [("m", np.array([5], np.int64)), ("iou", np.array([0.3], np.float32))]
    if inputs == "all":
        slots.append(("st", np.array([0.2], np.float32)))
    check("NonMaxSuppression", slots, opset=11, center_point_box=center)


def test_nms_compiles_once_per_distinct_input(rng):
    slots = [("b", _boxes(rng, 1, 9, 0)), ("s", rng.random((1, 2, 9)).astype(np.float32))]
    slots += [("m", np.array([3], np.int64)), ("iou", np.array([0.4], np.float32))]
    model = node_model("NonMaxSuppression", slots, opset=11)
    lib = ember.compile(model)
    feeds = {name: value for name, value in slots}
    first = lib.run(feeds)[0]
    again = lib.run({**feeds, "b": _boxes(rng, 1, 9, 0)})[0]
    assert first.shape[1] == again.shape[1] == 3
    lib.run(feeds)
    assert len(lib.value_specializations) == 2


def test_nms_over_too_many_boxes_is_refused_with_the_reason(rng):
    slots = [("b", _boxes(rng, 1, 1100, 0)), ("s", rng.random((1, 1, 1100)).astype(np.float32))]
    lib = ember.compile(node_model("NonMaxSuppression", slots, opset=11))
    with pytest.raises(ember.ArgumentError, match="at most 4096 elements"):
        lib.run({name: value for name, value in slots})


@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique_matches_onnxruntime(rng, sorted_, axis):
    x = rng.integers(0, 4, (6, 3)).astype(np.float32)
    x[4] = x[1]  # a repeated row, so slices along axis 0 repeat too
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    check("Unique", [("x", x)], n_outputs=4, opset=11, **attrs)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skip", [((1, 2), 0), ((2, 2), 3), ((1, 3), 2)])
def test_tfidf_vectorizer_matches_onnxruntime(rng, mode, grams, skip):
    """A pool of 1-, 2- and 3-grams over ids 0-5, rows of random ids (a 2-D batch)."""
    x = rng.integers(0, 6, (3, 11)).astype(np.int64)
    pool = [2, 3, 5, 4, 2, 3, 5, 4, 1, 0, 2, 3, 4]  # 4 unigrams, 3 bigrams, 1 trigram
    attrs = {
        "mode": mode,
        "min_gram_length": grams[0],
        "max_gram_length": grams[1],
        "max_skip_count": skip,
        "ngram_counts": [0, 4, 10],
        "ngram_indexes": [0, 1, 2, 3, 4, 5, 6, 7],
        "pool_int64s": pool,
        "weights": list(rng.uniform(0.5, 2, 8).astype(np.float32)),
    }
    check("TfIdfVectorizer", [("x", x)], opset=9, **attrs)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_matches_onnxruntime(rng, mode, transform, ratio):
    """Odd map and bin sizes, regions of several sizes, one reaching outside the map."""
    x = rng.standard_normal((2, 3, 11, 9)).astype(np.float32)
    rois = np.array(
        [[0.5, 1.0, 7.5, 9.0], [2.0, 0.0, 4.0, 3.0], [-3.0, 6.0, 12.0, 14.0]], np.float32
    )
    batch = np.array([1, 0, 1], np.int64)
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": transform,
        "output_height": 3,
        "output_width": 2,
        "sampling_ratio": ratio,
        "spatial_scale": 0.9,
    }
    check("RoiAlign", [("x", x), ("r", rois), ("i", batch)], opset=16, **attrs)


def test_roi_align_refuses_a_batch_index_outside_the_input(rng):
    x = rng.standard_normal((2, 1, 5, 5)).astype(np.float32)
    slots = [("x", x), ("r", np.array([[0, 0, 2, 2]], np.float32)), ("i", np.array([2], np.int64))]
    lib = ember.compile(node_model("RoiAlign", slots, opset=16))
    with pytest.raises(ember.ArgumentError, match="batch index is outside"):
        lib.run({name: value for name, value in slots})
