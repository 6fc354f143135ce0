"""Tasks that launch tasks.

* Divide-and-conquer merge sort where each task sorts small inputs itself and
  otherwise spawns two sub-tasks and ``ray.get``s them (the blocked parent must
  not starve its children of CPUs).
* A crawler-style fan-out task that returns a *list of refs* for the driver to
  collect, ``ray.put`` inside a task with the ref outliving the task, and refs
  nested inside containers passed as arguments (which are not resolved
  automatically, unlike top-level ref arguments).
"""
import random

import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)


def merge(left, right):
    out, i, j = [], 0, 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    return out + left[i:] + right[j:]


@ray.remote
def merge_sort(values, threshold):
    if len(values) <= threshold:
        return sorted(values)
    mid = len(values) // 2
    left = merge_sort.remote(values[:mid], threshold)
    right = merge_sort.remote(values[mid:], threshold)
    return merge(*ray.get([left, right]))


@ray.remote
def depth(n):
    return 0 if n == 0 else 1 + ray.get(depth.remote(n - 1))


def test_recursive_merge_sort():
    ray.init(num_cpus=2)
    rng = random.Random(42)
    values = [rng.randint(0, 10_000) for _ in range(300)]
    # 300 -> 150 -> 75 -> 38: three levels of blocked parents on only 2 CPUs.
    assert ray.get(merge_sort.remote(values, 40)) == sorted(values)
    # A chain of 6 nested tasks, each waiting on the next.
    assert ray.get(depth.remote(6)) == 6


PAGES = {
    "/": ["/a", "/b", "/c"],
    "/a": ["/a/1", "/a/2"],
    "/b": [],
    "/c": ["/c/1"],
}


@ray.remote
def fetch(url):
    return {"url": url, "links": PAGES.get(url, []), "size": len(url) * 100}


@ray.remote
def crawl_children(url):
    page = ray.get(fetch.remote(url))
    # Return the refs themselves; the caller decides when to wait.
    return [fetch.remote(link) for link in page["links"]]


@ray.remote
def make_shared_blob(n):
    # The object is created inside this task but must outlive it.
    return ray.put(list(range(n)))


@ray.remote
def total_size(pages):
    # `pages` is a dict of refs: refs nested in containers arrive as refs.
    assert all(isinstance(ref, ray.ObjectRef) for ref in pages.values())
    return sum(page["size"] for page in ray.get(list(pages.values())))


@ray.remote
def describe(page, extra):
    # Top-level ref argument arrives resolved; the one inside the list does not.
    return page["url"], isinstance(extra[0], ray.ObjectRef), ray.get(extra[0])["url"]


def test_refs_returned_and_nested_in_containers():
    ray.init(num_cpus=4)
    child_refs = ray.get(crawl_children.remote("/"))
    assert len(child_refs) == 3
    assert all(isinstance(r, ray.ObjectRef) for r in child_refs)
    children = ray.get(child_refs)
    assert [c["url"] for c in children] == ["/a", "/b", "/c"]

    grandchildren = ray.get(crawl_children.remote("/a"))
    assert [p["url"] for p in ray.get(grandchildren)] == ["/a/1", "/a/2"]

    blob_ref = ray.get(make_shared_blob.remote(50))
    assert isinstance(blob_ref, ray.ObjectRef)
    assert ray.get(blob_ref) == list(range(50))

    pages = {url: fetch.remote(url) for url in PAGES}
    assert ray.get(total_size.remote(pages)) == sum(len(u) * 100 for u in PAGES)

    root, nested_is_ref, nested_url = ray.get(describe.remote(fetch.remote("/"), [fetch.remote("/c")]))
    assert (root, nested_is_ref, nested_url) == ("/", True, "/c")
