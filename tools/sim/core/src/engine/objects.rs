//! Memory objects (files, anonymous regions) and the physical frames behind their pages:
//! where a page is placed, when it gets its frame, and which lines and slots it spans.

use super::Engine;
use crate::error::{Result, SimError};

/// Frame of a page not backed yet.
const NO_FRAME: u64 = u64::MAX;

/// Where an object's pages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Node of the first thread that touches the page (Linux's default).
    FirstTouch,
    /// A fixed node.
    Node(u32),
    /// Round-robin over all nodes, page by page.
    Interleave,
    /// A fixed node, only frames of the colors in `mask` (of `n_colors`).
    Colored { node: u32, n_colors: u32, mask: u64 },
}

/// A file or anonymous memory region, backed by physical frames allocated lazily.
#[derive(Debug, Clone)]
pub(super) struct Object {
    frames: Vec<u64>,
    slots: Vec<u32>,
    size: u64,
    placement: Placement,
}

/// The lines of one page that an access covers (see [`Engine::page_span`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    /// Bytes covered.
    pub(super) bytes: u64,
    /// First and last physical line covered.
    pub(super) first: u64,
    pub(super) last: u64,
    /// Slot of the first line (the others follow).
    pub(super) first_slot: u32,
}

impl Span {
    /// Slot of `line`, one of the lines of the span.
    #[inline(always)]
    pub(super) fn slot(&self, line: u64) -> u32 {
        self.first_slot + (line - self.first) as u32
    }
}

impl Engine {
    /// Create an object of `size` bytes; frames are allocated on first touch.
    pub fn add_object(&mut self, size: u64, placement: Placement) -> Result<u32> {
        let nodes = self.machine.config().nodes.len() as u32;
        match placement {
            Placement::Node(n) | Placement::Colored { node: n, .. } if n >= nodes => {
                return Err(SimError::NotFound("NUMA node", n as u64));
            }
            Placement::Colored { n_colors: 0, .. } | Placement::Colored { mask: 0, .. } => {
                return Err(SimError::Config(
                    "a colored object needs a non-empty color set".into(),
                ));
            }
            _ => {}
        }
        let page = self.machine.config().page_size as u64;
        let n = size.div_ceil(page) as usize;
        // the directory's rows for its pages, set aside now rather than grown page by page
        self.machine.reserve_pages(n as u64);
        self.objects.push(Object {
            frames: vec![NO_FRAME; n],
            slots: vec![0; n],
            size,
            placement,
        });
        Ok((self.objects.len() - 1) as u32)
    }

    /// Size in bytes of object `obj`.
    pub fn object_size(&self, obj: u32) -> Result<u64> {
        self.objects
            .get(obj as usize)
            .map(|o| o.size)
            .ok_or(SimError::NotFound("object", obj as u64))
    }

    /// Physical frame of page `page` of `obj`, if allocated.
    pub fn object_frame(&self, obj: u32, page: u64) -> Result<Option<u64>> {
        let f = self.frame_of(obj, page)?;
        Ok(if f == NO_FRAME { None } else { Some(f) })
    }

    /// Back page `page` of `obj` now with a frame of `node`, of color `color` of `n_colors`
    /// when given (the caller's page-coloring policy decides it), else a random frame.
    /// Returns the frame. The page must not have a frame yet.
    pub fn place_page(
        &mut self,
        obj: u32,
        page: u64,
        node: u32,
        color: Option<(u64, u64)>,
    ) -> Result<u64> {
        let f = self.frame_of(obj, page)?;
        if f != NO_FRAME {
            return Err(SimError::Config(format!(
                "page {page} of object {obj} already has frame {f}"
            )));
        }
        if node as usize >= self.machine.config().nodes.len() {
            return Err(SimError::NotFound("NUMA node", node as u64));
        }
        let f = match color {
            Some((n, c)) => self.pages.alloc_color(node as usize, n, c)?,
            None => self.pages.alloc(node as usize, None)?,
        };
        self.back_page(obj, page, f)?;
        Ok(f)
    }

    /// Frames in use and total frames of `node`.
    pub fn node_frames(&self, node: u32) -> Result<(u64, u64)> {
        let n = node as usize;
        if n >= self.machine.config().nodes.len() {
            return Err(SimError::NotFound("NUMA node", node as u64));
        }
        Ok((self.pages.used_on(n), self.pages.frames_of(n)))
    }

    /// Release an object's frames.
    pub fn free_object(&mut self, obj: u32) -> Result<()> {
        let o = self
            .objects
            .get_mut(obj as usize)
            .ok_or(SimError::NotFound("object", obj as u64))?;
        for f in o.frames.iter_mut() {
            if *f != NO_FRAME {
                self.pages.free(*f);
                *f = NO_FRAME;
            }
        }
        Ok(())
    }

    /// The frame (or [`NO_FRAME`]) of page `page` of `obj`, both checked.
    fn frame_of(&self, obj: u32, page: u64) -> Result<u64> {
        let o = self
            .objects
            .get(obj as usize)
            .ok_or(SimError::NotFound("object", obj as u64))?;
        o.frames
            .get(page as usize)
            .copied()
            .ok_or(SimError::NotFound("page", page))
    }

    /// Back page `pidx` of `obj` with frame `f`, giving its lines slots; returns the first.
    fn back_page(&mut self, obj: u32, pidx: u64, f: u64) -> Result<u32> {
        let slot = self.machine.register_page(f)?;
        self.objects[obj as usize].frames[pidx as usize] = f;
        self.objects[obj as usize].slots[pidx as usize] = slot;
        Ok(slot)
    }

    /// The frame and first slot of page `pidx` of `obj`, placing the page now, as its
    /// placement says for an access from `cpu`, if it has no frame yet.
    fn frame_for(&mut self, obj: u32, pidx: u64, cpu: usize) -> Result<(u64, u32)> {
        let o = &self.objects[obj as usize];
        let f = o.frames[pidx as usize];
        if f != NO_FRAME {
            return Ok((f, o.slots[pidx as usize]));
        }
        let nodes = self.machine.config().nodes.len() as u32;
        let (node, colors) = match o.placement {
            Placement::FirstTouch => (self.machine.config().cpu_node[cpu], None),
            Placement::Node(n) => (n, None),
            Placement::Interleave => {
                let n = self.interleave_next % nodes;
                self.interleave_next = self.interleave_next.wrapping_add(1);
                (n, None)
            }
            Placement::Colored {
                node,
                n_colors,
                mask,
            } => (node, Some((n_colors as u64, mask))),
        };
        let f = self.pages.alloc(node as usize, colors)?;
        let slot = self.back_page(obj, pidx, f)?;
        Ok((f, slot))
    }

    /// The lines that `len` bytes of `obj` from `offset` cover in the page of `offset`
    /// (up to the page's end), that page placed for an access from `cpu` if need be.
    pub(super) fn page_span(
        &mut self,
        obj: u32,
        offset: u64,
        len: u64,
        cpu: usize,
    ) -> Result<Span> {
        let page = self.machine.config().page_size as u64;
        let pidx = offset / page;
        let in_page = offset % page;
        let bytes = (page - in_page).min(len);
        let (frame, slot0) = self.frame_for(obj, pidx, cpu)?;
        let page_first = (frame * page) >> self.line_shift;
        let first = (frame * page + in_page) >> self.line_shift;
        let last = (frame * page + in_page + bytes - 1) >> self.line_shift;
        Ok(Span {
            bytes,
            first,
            last,
            first_slot: slot0 + (first - page_first) as u32,
        })
    }
}
