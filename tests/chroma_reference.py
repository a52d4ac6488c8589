"""Chroma's chunking-evaluation arithmetic, transcribed as the oracle of the span metrics' tests.

Source: github.com/brandonstarxel/chunking_evaluation (MIT licence, Copyright (c) 2024 Brandon Smith),
chunking_evaluation/evaluation_framework/base_evaluation.py at commit d451fc4: the range helpers
``sum_of_ranges``, ``union_ranges``, ``intersect_two_ranges`` and ``difference`` as they are, and the
per-question bodies of ``BaseEvaluation._scores_from_dataset_and_retrievals`` (recall, precision and
IoU over the top k) and ``BaseEvaluation._full_precision_score`` (precision-omega), taken out of their
loops over a DataFrame so that they take one question's references and chunks. Nothing else changed:
the package itself is not on the package index and needs chromadb and an embedding model to run.

A reference is ``{"start_index", "end_index"}``; a chunk's metadata is ``{"start_index",
"end_index", "corpus_id"}``.
"""


def sum_of_ranges(ranges):
    return sum(end - start for start, end in ranges)


def union_ranges(ranges):
    # Sort ranges based on the starting index
    sorted_ranges = sorted(ranges, key=lambda x: x[0])

    # Initialize with the first range
    merged_ranges = [sorted_ranges[0]]

    for current_start, current_end in sorted_ranges[1:]:
        last_start, last_end = merged_ranges[-1]

        # Check if the current range overlaps or is contiguous with the last range in the merged list
        if current_start <= last_end:
            # Merge the two ranges
            merged_ranges[-1] = (last_start, max(last_end, current_end))
        else:
            # No overlap, add the current range as new
            merged_ranges.append((current_start, current_end))

    return merged_ranges


def intersect_two_ranges(range1, range2):
    # Unpack the ranges
    start1, end1 = range1
    start2, end2 = range2

    # Calculate the maximum of the starting indices and the minimum of the ending indices
    intersect_start = max(start1, start2)
    intersect_end = min(end1, end2)

    # Check if the intersection is valid (the start is less than or equal to the end)
    if intersect_start <= intersect_end:
        return (intersect_start, intersect_end)
    else:
        return None  # Return an None if there is no intersection


def difference(ranges, target):
    result = []
    target_start, target_end = target

    for start, end in ranges:
        if end < target_start or start > target_end:
            # No overlap
            result.append((start, end))
        elif start < target_start and end > target_end:
            # Target is a subset of this range, split it into two ranges
            result.append((start, target_start))
            result.append((target_end, end))
        elif start < target_start:
            # Overlap at the start
            result.append((start, target_start))
        elif end > target_end:
            # Overlap at the end
            result.append((target_end, end))
        # Else, this range is fully contained by the target, and is thus removed

    return result


def scores_from_retrievals(references, corpus_id, metadatas, highlighted_chunk_count):
    """One question of ``_scores_from_dataset_and_retrievals``: ``(iou, recall, precision)`` over
    ``metadatas[:highlighted_chunk_count]`` (the retrieved chunks, best first)."""
    numerator_sets = []
    denominator_chunks_sets = []
    unused_highlights = [(x['start_index'], x['end_index']) for x in references]

    for metadata in metadatas[:highlighted_chunk_count]:
        # Unpack chunk start and end indices
        chunk_start, chunk_end, chunk_corpus_id = metadata['start_index'], metadata['end_index'], metadata['corpus_id']  # noqa: E501

        if chunk_corpus_id != corpus_id:
            continue

        for ref_obj in references:
            ref_start, ref_end = int(ref_obj['start_index']), int(ref_obj['end_index'])

            # Calculate intersection between chunk and reference
            intersection = intersect_two_ranges((chunk_start, chunk_end), (ref_start, ref_end))

            if intersection is not None:
                # Remove intersection from unused highlights
                unused_highlights = difference(unused_highlights, intersection)

                # Add intersection to numerator sets
                numerator_sets = union_ranges([intersection] + numerator_sets)

                # Add chunk to denominator sets
                denominator_chunks_sets = union_ranges([(chunk_start, chunk_end)] + denominator_chunks_sets)

    if numerator_sets:
        numerator_value = sum_of_ranges(numerator_sets)
    else:
        numerator_value = 0

    recall_denominator = sum_of_ranges([(x['start_index'], x['end_index']) for x in references])
    precision_denominator = sum_of_ranges([(x['start_index'], x['end_index'])
                                           for x in metadatas[:highlighted_chunk_count]])
    iou_denominator = precision_denominator + sum_of_ranges(unused_highlights)

    recall_score = numerator_value / recall_denominator
    precision_score = numerator_value / precision_denominator
    iou_score = numerator_value / iou_denominator
    return iou_score, recall_score, precision_score


def full_precision_score(references, corpus_id, chunk_metadatas):
    """One question of ``_full_precision_score``: precision-omega over every chunk of the collection,
    and how many chunks hold part of a reference."""
    ioc_score = 0
    numerator_sets = []
    denominator_chunks_sets = []
    unused_highlights = [(x['start_index'], x['end_index']) for x in references]

    highlighted_chunk_count = 0

    for metadata in chunk_metadatas:
        # Unpack chunk start and end indices
        chunk_start, chunk_end, chunk_corpus_id = metadata['start_index'], metadata['end_index'], metadata['corpus_id']  # noqa: E501

        if chunk_corpus_id != corpus_id:
            continue

        contains_highlight = False

        for ref_obj in references:
            ref_start, ref_end = int(ref_obj['start_index']), int(ref_obj['end_index'])
            # Calculate intersection between chunk and reference
            intersection = intersect_two_ranges((chunk_start, chunk_end), (ref_start, ref_end))

            if intersection is not None:
                contains_highlight = True

                # Remove intersection from unused highlights
                unused_highlights = difference(unused_highlights, intersection)

                # Add intersection to numerator sets
                numerator_sets = union_ranges([intersection] + numerator_sets)

                # Add chunk to denominator sets
                denominator_chunks_sets = union_ranges([(chunk_start, chunk_end)] + denominator_chunks_sets)

        if contains_highlight:
            highlighted_chunk_count += 1

    # Combine unused highlights and chunks for final denominator
    denominator_sets = union_ranges(denominator_chunks_sets + unused_highlights)

    # Calculate ioc_score if there are numerator sets
    if numerator_sets:
        ioc_score = sum_of_ranges(numerator_sets) / sum_of_ranges(denominator_sets)

    return ioc_score, highlighted_chunk_count
