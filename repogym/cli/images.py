"""``repogym images build | list`` and ``repogym gc``: the Docker side."""

from __future__ import annotations


def add_parser(sub) -> None:
    parser = sub.add_parser("images", help="build or list the Docker images",
                            description="The Docker images episodes run in: build the base and default "
                                        "environment images, or list the repogym images present.")
    isub = parser.add_subparsers(dest="images_command", required=True, metavar="ACTION")
    build = isub.add_parser("build", help="build the base image (pulled where a registry answers, else debootstrap) "
                                          "and the default environment image",
                            description="Build the base image (pulled where a registry answers, else built with "
                                        "debootstrap) and the default environment image; prints the latter's tag.")
    build.add_argument("--force", action="store_true", help="rebuild the base image even if present")
    build.add_argument("--no-pull", action="store_true", help="do not try a registry; build offline")
    build.add_argument("--python", default=None, metavar="VERSION",
                       help="the base image of this Python (3.9, 3.11, 3.13; default 3.11)")
    build.add_argument("--toolchain", choices=["build"], default=None,
                       help="build: the base variant with compilers and headers (gcc, g++, gfortran, python3-dev, "
                            "freetype, libpng, OpenBLAS), what setup.toolchain asks for")
    build.set_defaults(func=run_build)
    ls = isub.add_parser("list", help="list repogym images",
                         description="List the repogym/ images: tag, short id and size.")
    ls.set_defaults(func=run_list)
    gc = sub.add_parser("gc", help="remove what crashed repogym processes left behind (containers, volumes, "
                                   "temp dirs, cgroups)",
                        description="Remove what crashed repogym processes left behind: containers and volumes "
                                    "labelled repogym, local sandbox temp dirs and empty repogym cgroups whose "
                                    "owner is dead; never anything repogym did not create.")
    gc.add_argument("--run", default=None, help="only containers, volumes, temp dirs and cgroups of this run id")
    gc.add_argument("--older-than", type=float, default=0.0, metavar="S",
                    help="only leftovers at least this many seconds old (default 0)")
    gc.add_argument("--stale-after", type=float, default=120.0, metavar="S",
                    help="a heartbeat older than this many seconds means its owner is dead (default 120)")
    gc.add_argument("--dry-run", action="store_true", help="list, do not remove")
    gc.set_defaults(func=run_gc)


def run_build(args) -> int:
    from repogym.envs.sandbox.images import DEFAULT_PYTHON, build_base_image, ensure_env_image, python_of
    python = python_of({"python": args.python or DEFAULT_PYTHON})  # checked before minutes of building
    build_base_image(force=args.force, pull=not args.no_pull, python=python, toolchain=args.toolchain)
    setup = {**({"python": python} if args.python else {}), **({"toolchain": args.toolchain} if args.toolchain else {})}
    print(ensure_env_image(setup, log=print))
    return 0


def run_list(args) -> int:
    from repogym.envs.sandbox.docker import docker_client
    for image in docker_client().images.list():
        for tag in image.tags:
            if tag.startswith("repogym/"):
                print(f"{tag}\t{image.short_id}\t{image.attrs['Size'] / 1e6:.0f} MB")
    return 0


def run_gc(args) -> int:
    from repogym.envs.core.errors import ConfigError
    from repogym.envs.sandbox.gc import KINDS, reap
    if args.older_than < 0:
        raise ConfigError(f"expected --older-than >= 0, got {args.older_than:g}")
    if args.stale_after <= 0:  # 0 would take every live heartbeat for a dead owner and remove its sandboxes
        raise ConfigError(f"expected --stale-after > 0, got {args.stale_after:g}")
    report = reap(args.run, args.older_than, args.stale_after, args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    done = [x for x in report.leftovers if args.dry_run or x.removed]
    print(f"{verb} {len(done)} leftover(s)")
    for kind in KINDS:
        items = [x for x in report.leftovers if x.kind == kind]
        if items:
            print(f"{kind} ({len(items)}):")
        for item in items:
            print(f"  {item.name}  {item.reason}" + (f"  [not removed: {item.error}]" if item.error else ""))
    for part, why in report.skipped.items():
        print(f"skipped {part}: {why}")
    return 0
