"""page_items: cursor pages over a response's input items."""

from __future__ import annotations

import pytest

from omni.errors import InvalidRequest
from omni.projections.input_items import page_items

ITEMS = [{"id": f"item_{i}", "type": "message"} for i in range(7)]
IDS = [i["id"] for i in ITEMS]


def ids(page):  # type: ignore[no-untyped-def]
    return [i["id"] for i in page["data"]]


def test_shape() -> None:
    page = page_items(ITEMS, None, 3, "asc")
    assert set(page) == {"object", "data", "first_id", "last_id", "has_more"}
    assert page["object"] == "list"


def test_asc() -> None:
    page = page_items(ITEMS, None, 3, "asc")
    assert ids(page) == IDS[:3]
    assert (page["first_id"], page["last_id"], page["has_more"]) == ("item_0", "item_2", True)


def test_desc() -> None:
    page = page_items(ITEMS, None, 3, "desc")
    assert ids(page) == ["item_6", "item_5", "item_4"]
    assert (page["first_id"], page["last_id"], page["has_more"]) == ("item_6", "item_4", True)


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_after_applies_in_the_requested_order(order: str) -> None:
    ordered = IDS if order == "asc" else IDS[::-1]
    page = page_items(ITEMS, ordered[1], 2, order)  # type: ignore[arg-type]
    assert ids(page) == ordered[2:4]
    assert page["has_more"] is True


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("limit", [1, 2, 3, 7, 100])
def test_walking_pages_visits_every_item_once(order: str, limit: int) -> None:
    seen: list[str] = []
    after = None
    while True:
        page = page_items(ITEMS, after, limit, order)  # type: ignore[arg-type]
        seen += ids(page)
        assert len(page["data"]) <= limit
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert seen == (IDS if order == "asc" else IDS[::-1])


def test_exact_fit_has_no_more() -> None:
    assert page_items(ITEMS, None, 7, "asc")["has_more"] is False
    assert page_items(ITEMS, None, 6, "asc")["has_more"] is True
    assert page_items(ITEMS, "item_4", 2, "asc")["has_more"] is False


def test_after_the_last_item_is_an_empty_page() -> None:
    page = page_items(ITEMS, "item_6", 5, "asc")
    assert page["data"] == [] and page["has_more"] is False
    assert page["first_id"] == "" and page["last_id"] == ""


def test_empty_list() -> None:
    for order in ("asc", "desc"):
        page = page_items([], None, 20, order)  # type: ignore[arg-type]
        assert page == {
            "object": "list",
            "data": [],
            "first_id": "",
            "last_id": "",
            "has_more": False,
        }


def test_unknown_after_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as exc:
        page_items(ITEMS, "item_nope", 2, "asc")
    assert exc.value.param == "after"
    assert exc.value.status == 400


def test_input_is_not_mutated() -> None:
    items = [dict(i) for i in ITEMS]
    page_items(items, None, 3, "desc")
    assert items == ITEMS
