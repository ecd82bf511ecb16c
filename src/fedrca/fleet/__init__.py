"""The fleet detector (P5, CollabDict): same-type plants learning one anomaly model peer to peer (pure core).

A fleet of plants of one type learns a shared sparse Gaussian-graphical-model
mixture without pooling data: every sum the learning needs is agreed by
decentralised average consensus over random chunks, so no participant's raw
values or statistics reach anybody else.

* :mod:`fedrca.fleet.consensus`: peer graphs, consensus sessions, random chunking,
  re-labelling, messages and their vectorised twin;
* :mod:`fedrca.fleet.collabdict`: the mixture (E-step statistics, MAP M-step with
  graphical lasso, score, l-diversity) and the centralised twin;
* :mod:`fedrca.fleet.model`: a participant's whole protocol as a generator, the
  in-process network and :func:`~fedrca.fleet.model.simulate_fleet`;
* :mod:`fedrca.fleet.detector`: :class:`~fedrca.fleet.detector.FleetDetector`, the
  plant detector a site runs with ``detector.kind: fleet``.

It sits above the per-plant detection core (:mod:`fedrca.detectors`: the
``Detector`` contract, standardiser) and beside ``training`` and ``rca``, which never
import it. Its application (configuration, sources, runner, model files, the Kafka
driver) is :mod:`fedrca.application.fleet`, the command :mod:`fedrca.cli.fleet`
(``fedrca fleet``); see docs/fleet.md.
"""

from fedrca.fleet.collabdict import FleetModel, FleetSettings, fit_centralised
from fedrca.fleet.consensus import PeerGraph
from fedrca.fleet.detector import FleetDetector, build_fleet_detector
from fedrca.fleet.model import FleetParticipant, FleetRun, simulate_fleet

__all__ = [
    "FleetDetector",
    "FleetModel",
    "FleetParticipant",
    "FleetRun",
    "FleetSettings",
    "PeerGraph",
    "build_fleet_detector",
    "fit_centralised",
    "simulate_fleet",
]
