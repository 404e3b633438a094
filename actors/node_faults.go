package actors

// faultHooks inject failures into the node's actors, for tests; nil in production. Each
// hook may panic to make its actor fail mid-run.
type faultHooks struct {
	governor func(msg any)             // before the governor handles a message
	reaper   func(msg any)             // before the reaper handles a message
	drain    func(msg any)             // before a drain handles a message
	batch    func(b *chunksDrained)    // in a drain, on each batch before it is sent (may alter it)
	reader   func(msg any)             // before a reader handles a message (lifecycle ones too)
	stream   func(msg any)             // before a stream supervisor handles a message
	transfer func(sub *submitTransfer) // in a transfer task, before the upload
	task     func(name string)         // in a task, before its operation
}

func (f *faultHooks) atGovernor(msg any) {
	if f != nil && f.governor != nil {
		f.governor(msg)
	}
}

func (f *faultHooks) atReaper(msg any) {
	if f != nil && f.reaper != nil {
		f.reaper(msg)
	}
}

func (f *faultHooks) atDrain(msg any) {
	if f != nil && f.drain != nil {
		f.drain(msg)
	}
}

func (f *faultHooks) atBatch(b *chunksDrained) {
	if f != nil && f.batch != nil {
		f.batch(b)
	}
}

func (f *faultHooks) atReader(msg any) {
	if f != nil && f.reader != nil {
		f.reader(msg)
	}
}

func (f *faultHooks) atStream(msg any) {
	if f != nil && f.stream != nil {
		f.stream(msg)
	}
}

func (f *faultHooks) atTransfer(sub *submitTransfer) {
	if f != nil && f.transfer != nil {
		f.transfer(sub)
	}
}

func (f *faultHooks) atTask(name string) {
	if f != nil && f.task != nil {
		f.task(name)
	}
}
