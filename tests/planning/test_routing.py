"""Routing advice: one test per seed-table rule. GPU values below are constructed from NVIDIA's published
memory sizes (no GPU was read); the model facts come from the built-in catalog."""

from __future__ import annotations

import pytest

from shared.catalog import CATALOG
from shared.config import JobConfig
from shared.models import GpuInfo, GpuLink
from shared.routing import GPU_SPEEDS, Advice, Interconnect, advise, gpu_speed, heterogeneous_speedup

GIB = 1 << 30
LLAMA7 = CATALOG["meta-llama/Llama-2-7b-hf"].arch


def gpu(name: str, total_gib: float, index: int = 0, free_gib: float | None = None, **kw: object) -> GpuInfo:
    total = int(total_gib * GIB)
    return GpuInfo(index=index, name=name, memory_total_bytes=total,
                   memory_free_bytes=int((free_gib if free_gib is not None else total_gib * 0.97) * GIB), **kw)


def by_id(advice: list[Advice], ident: str) -> Advice:
    found = [a for a in advice if a.id == ident]
    assert found, f"no {ident!r} advice in {[a.id for a in advice]}"
    return found[0]


ONE_A100 = {"node0": [gpu("NVIDIA A100-SXM4-80GB", 80)]}
LAN = Interconnect(ethernet_gbps=1)


# ---------------------------------------------------------------- hardware-selection-guide.md (seed 001)


@pytest.mark.parametrize("hf_id, label", [
    ("Qwen/Qwen2.5-0.5B", "<1B"),
    ("Qwen/Qwen2.5-1.5B", "1-3B"),
    ("mistralai/Mistral-7B-v0.1", "7-13B"),  # 7.24B sits just above the seed's 3-7B bin
    ("meta-llama/Llama-2-7b-hf", "3-7B"),
    ("meta-llama/Meta-Llama-3-8B", "7-13B"),
    ("meta-llama/Llama-2-70b-hf", ">13B"),
])
def test_size_class_follows_the_hardware_map(hf_id: str, label: str) -> None:
    advice = by_id(advise(ONE_A100, LAN, CATALOG[hf_id].arch, JobConfig(method="qlora")), "size_class")
    assert label in advice.title and "HARDWARE_MAP" in advice.reason and advice.severity == "info"


def test_full_finetune_over_13b_needs_lora() -> None:
    advice = by_id(advise(ONE_A100, LAN, CATALOG["Qwen/Qwen2.5-14B"].arch, JobConfig(method="full")), "method")
    assert advice.severity == "warn" and "lora" in advice.recommendation and "13B+" in advice.reason


def test_full_finetune_of_7_to_13b_always_lora() -> None:
    advice = by_id(advise(ONE_A100, LAN, CATALOG["meta-llama/Meta-Llama-3-8B"].arch, JobConfig(method="full")), "method")
    assert advice.severity == "warn" and "Always use LoRA/PEFT" in advice.reason


# ---------------------------------------------------------------- hardware-and-backend-routing.md: Fast Routing


def test_one_gpu_prefers_peft_even_when_full_fits() -> None:
    arch = CATALOG["Qwen/Qwen2.5-0.5B"].arch
    advice = by_id(advise(ONE_A100, LAN, arch, JobConfig(method="full", optimizer="adamw")), "method")
    assert "PEFT" in advice.title and "Fast Routing" in advice.reason
    assert advice.severity == "info"  # full fits on 80 GB: allowed, PEFT preferred


def test_full_only_when_it_fits() -> None:
    small = {"node0": [gpu("NVIDIA GeForce RTX 3070 Ti", 8)]}
    advice = by_id(advise(small, LAN, CATALOG["Qwen/Qwen2.5-1.5B"].arch, JobConfig(method="full", optimizer="adamw")), "method")
    assert advice.severity == "warn" and ("lora" in advice.recommendation or "qlora" in advice.recommendation)


def test_method_that_does_not_fit_gets_one_that_does() -> None:
    cluster = {"node0": [gpu("NVIDIA GeForce RTX 4070 Laptop GPU", 8)], "node1": [gpu("NVIDIA GeForce RTX 3070 Ti", 8)]}
    advice = by_id(advise(cluster, LAN, LLAMA7, JobConfig(method="lora")), "method")
    assert advice.severity == "warn" and advice.recommendation == 'method = "qlora"'


# ---------------------------------------------------------------- multi-node-architecture-guide.md: Decision Tree


def test_ddp_when_the_model_fits_one_gpu() -> None:
    cluster = {f"node{i}": [gpu("NVIDIA GeForce RTX 3090", 24)] for i in range(3)}
    advice = by_id(advise(cluster, LAN, LLAMA7, JobConfig(method="qlora")), "sharding")
    assert advice.recommendation == 'sharding = "ddp"' and "Decision Tree" in advice.reason and advice.severity == "info"


def test_fsdp_requested_although_ddp_fits_is_flagged() -> None:
    cluster = {f"node{i}": [gpu("NVIDIA GeForce RTX 3090", 24)] for i in range(2)}
    advice = by_id(advise(cluster, LAN, LLAMA7, JobConfig(method="qlora", sharding="fsdp")), "sharding")
    assert advice.severity == "warn" and "ddp" in advice.recommendation


def test_fsdp_when_only_the_sharded_states_fit() -> None:
    node = [gpu("NVIDIA GeForce RTX 3090", 24, index=i) for i in range(8)]
    arch = CATALOG["meta-llama/Llama-2-70b-hf"].arch
    advice = by_id(advise({"node0": node}, LAN, arch, JobConfig(method="qlora", seq_len=1024)), "sharding")
    assert advice.recommendation == 'sharding = "fsdp"' and "Total VRAM > Model size? YES" in advice.reason


def test_quantize_more_when_nothing_fits() -> None:
    cluster = {"node0": [gpu("NVIDIA GeForce RTX 3070 Ti", 8)], "node1": [gpu("NVIDIA GeForce RTX 3070 Ti", 8)]}
    arch = CATALOG["meta-llama/Llama-2-70b-hf"].arch
    advice = by_id(advise(cluster, LAN, arch, JobConfig(method="lora")), "sharding")
    assert advice.severity == "warn" and "Quantize more aggressively" in advice.reason


# ---------------------------------------------------------------- Interconnect Rules


def _nvlinked(count: int) -> list[GpuInfo]:
    return [gpu("NVIDIA H100 80GB HBM3", 80, index=i, nvlink_active_links=18,
                topology=[GpuLink(peer_index=j, link="nvlink") for j in range(count) if j != i]) for i in range(count)]


def test_tensor_parallel_only_inside_nvlink() -> None:
    cluster = {"dgx": _nvlinked(4), "pcie": [gpu("NVIDIA L40S", 48, index=i, topology=[GpuLink(peer_index=1 - i, link="host_bridge")]) for i in range(2)]}
    advice = by_id(advise(cluster, Interconnect(infiniband=True), LLAMA7, JobConfig()), "tensor_parallel")
    assert "NVLink inside dgx" in advice.recommendation
    assert "pcie: GPUs on PCIe only" in advice.recommendation
    assert "never across nodes" in advice.recommendation and "Interconnect Rules" in advice.reason


def test_infiniband_allows_data_parallel_across_nodes() -> None:
    cluster = {"a": _nvlinked(2), "b": _nvlinked(2)}
    advice = by_id(advise(cluster, Interconnect(infiniband=True), LLAMA7, JobConfig()), "inter_node")
    assert advice.severity == "info" and "InfiniBand: pipeline/data parallelism across nodes is acceptable" in advice.reason


def test_ethernet_full_finetune_gradient_allreduce_is_slow() -> None:
    cluster = {f"n{i}": [gpu("NVIDIA A100-SXM4-80GB", 80)] for i in range(2)}
    advice = by_id(advise(cluster, Interconnect(ethernet_gbps=1), CATALOG["Qwen/Qwen2.5-0.5B"].arch, JobConfig(method="full")), "inter_node")
    # 494M fp32 gradients = 1.98 GB; ring all-reduce over 2 ranks moves 1× that; 1 Gbit/s at 55 % ≈ 0.069 GB/s → ≈ 29 s
    assert advice.severity == "warn" and "50–60 %" in advice.reason
    assert "≈ 28.7 s" in advice.reason or "≈ 28.8 s" in advice.reason


def test_ethernet_lora_is_cheap_to_synchronise() -> None:
    cluster = {f"n{i}": [gpu("NVIDIA GeForce RTX 3090", 24)] for i in range(3)}
    advice = by_id(advise(cluster, Interconnect(ethernet_gbps=1), LLAMA7, JobConfig(method="qlora")), "inter_node")
    assert advice.severity == "info" and "data parallel" in advice.recommendation


# ---------------------------------------------------------------- Guardrails


def test_global_batch_divisible_by_construction() -> None:
    cluster = {f"n{i}": [gpu("NVIDIA GeForce RTX 3090", 24)] for i in range(3)}
    advice = by_id(advise(cluster, LAN, LLAMA7, JobConfig(micro_batch_size=1, grad_accum_steps=8)), "global_batch")
    assert advice.title == "Global batch 24" and advice.severity == "info"  # seed: 1 × 3 GPUs × 8 = 24


def test_global_batch_target_not_divisible_suggests_grad_accum() -> None:
    cluster = {f"n{i}": [gpu("NVIDIA GeForce RTX 3090", 24)] for i in range(3)}
    advice = by_id(advise(cluster, LAN, LLAMA7, JobConfig(micro_batch_size=2), global_batch=32), "global_batch")
    assert advice.severity == "warn"
    assert "grad_accum_steps = 5 (global 30)" in advice.recommendation and "grad_accum_steps = 6 (global 36)" in advice.recommendation
    assert "divisible by data-parallel size" in advice.reason


def test_global_batch_target_reachable() -> None:
    cluster = {f"n{i}": [gpu("NVIDIA GeForce RTX 3090", 24)] for i in range(4)}
    advice = by_id(advise(cluster, LAN, LLAMA7, JobConfig(micro_batch_size=2, grad_accum_steps=8), global_batch=32), "global_batch")
    assert advice.recommendation == "grad_accum_steps = 4"


def test_smoke_first_always() -> None:
    advice = by_id(advise(ONE_A100, LAN, LLAMA7, JobConfig()), "smoke_first")
    assert "micro_batch_size = 1" in advice.recommendation and "micro batch size 1 and a tiny config" in advice.reason


# ---------------------------------------------------------------- Heterogeneous GPU Scaling (seed 003)

SEED_CLUSTER = {
    "master": [gpu("NVIDIA GeForce RTX 5070 Ti", 12)],
    "worker1": [gpu("NVIDIA GeForce RTX 4070 Laptop GPU", 8)],
    "worker2": [gpu("NVIDIA GeForce RTX 3070 Ti", 8)],
}


def test_heterogeneous_runs_at_the_slowest_pace() -> None:
    advice = by_id(advise(SEED_CLUSTER, LAN, LLAMA7, JobConfig()), "heterogeneous")
    assert advice.severity == "warn" and "SLOWEST GPU" in advice.reason
    speedup, efficiency = heterogeneous_speedup([g.name for gs in SEED_CLUSTER.values() for g in gs])  # type: ignore[misc]
    # n × slowest / fastest = 3 × 20.0 / 43.9: the seed's "~2.5x (not 3x)" is optimistic for these cards
    assert speedup == pytest.approx(3 * 20.0 / 43.9, rel=1e-3) and speedup < 2.5
    assert efficiency == pytest.approx(3 * 20.0 / (43.9 + 20.0 + 21.7), rel=1e-3)
    assert f"{speedup:.2f}×" in advice.reason and "RTX 4070 Laptop" in advice.reason


def test_identical_gpus_get_no_heterogeneity_advice() -> None:
    cluster = {f"n{i}": [gpu("NVIDIA GeForce RTX 3090", 24)] for i in range(3)}
    assert not [a for a in advise(cluster, LAN, LLAMA7, JobConfig()) if a.id == "heterogeneous"]


def test_unknown_gpu_still_warns_without_a_number() -> None:
    cluster = {"a": [gpu("NVIDIA GeForce RTX 3090", 24)], "b": [gpu("Some Future GPU", 32)]}
    advice = by_id(advise(cluster, LAN, LLAMA7, JobConfig()), "heterogeneous")
    assert "relative speeds unknown" in advice.reason and "less than 2×" in advice.reason


def test_speed_table_bases_are_not_mixed() -> None:
    assert heterogeneous_speedup(["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"]) is None
    assert gpu_speed("NVIDIA H100 PCIe").tflops == 756  # type: ignore[union-attr]
    assert gpu_speed("NVIDIA H100 80GB HBM3").tflops == 989  # type: ignore[union-attr]
    assert gpu_speed("NVIDIA GeForce RTX 4070 Ti").tflops == 40.1  # type: ignore[union-attr]
    assert all(entry.source for entry in GPU_SPEEDS)


# ---------------------------------------------------------------- every advice carries its reason


def test_every_advice_has_a_reason_from_a_seed_or_the_estimate() -> None:
    cluster = dict(SEED_CLUSTER, dgx=_nvlinked(2))
    for item in advise(cluster, LAN, LLAMA7, JobConfig(), global_batch=25):
        assert item.reason and item.recommendation and item.severity in ("info", "warn")
        assert ".md" in item.reason or "estimate" in item.reason, item


def test_every_citation_is_a_section_of_a_document_the_repository_ships():
    import re
    from pathlib import Path

    from shared import routing

    doc = Path(__file__).resolve().parents[2] / routing.RULES_DOC
    headings = set(re.findall(r"^## (.+)$", doc.read_text(), re.M))
    citations = [getattr(routing, n) for n in dir(routing) if n.startswith("SEED_")] + [routing.FIELD_NOTES_TCP]
    for citation in citations:
        assert routing.RULES_DOC in citation, citation
        section = re.search(r"'([^']+)'", citation.split(routing.RULES_DOC, 1)[1]).group(1)
        assert section in headings, f"{citation!r}: no section {section!r} in {routing.RULES_DOC}"
